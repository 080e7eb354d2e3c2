"""Sending one request and reading its stream: the OpenAI-compatible transport and the SSE parser."""
