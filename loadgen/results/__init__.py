"""What a run leaves: per-request records, statistics, the merge of shards, `vllm bench serve`s
result JSON, the summary and the exit code."""
