"""What to send and when: workloads (built as sent), their memory, arrivals, the runner, shards."""
