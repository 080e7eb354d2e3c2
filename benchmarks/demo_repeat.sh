#!/usr/bin/env bash
# Runs `make demo`'s job N times in a row (default 20) and counts the verdicts: the demo must
# pass every time. Usage: bash benchmarks/demo_repeat.sh [N] [OUT_DIR]
# Each run keeps its directory under OUT_DIR (default runs/demo-repeat) for a look at failures.
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
out=${2:-runs/demo-repeat}
bash scripts/bootstrap.sh
mkdir -p "$out"
pass=0; other=0
for i in $(seq 1 "$n"); do
  d="$out/run-$i"
  rm -rf "$d"
  start=$(date +%s)
  .venv/bin/validate --profile profiles/tiny-cpu.yaml --out "$d" > "$d.log" 2>&1
  rc=$?
  verdict=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1]))['verdict'])" "$d/report.json" 2>/dev/null || echo none)
  if [ "$rc" = 0 ] && [ "$verdict" = pass ]; then pass=$((pass + 1)); else other=$((other + 1)); fi
  echo "run $i: exit $rc, verdict $verdict, $(( $(date +%s) - start )) s"
done
echo "demo: $pass of $n passed ($other did not)"
[ "$pass" = "$n" ]
