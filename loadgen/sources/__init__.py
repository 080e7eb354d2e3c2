"""Where requests come from besides the synthetic generators: datasets and traces, read into a Workload."""
