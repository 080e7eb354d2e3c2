from loadgen.main import main

raise SystemExit(main())
