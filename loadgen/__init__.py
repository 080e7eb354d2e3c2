"""kvgate's load generator (never imports validator)."""


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("kvgate")
    except metadata.PackageNotFoundError:  # run from a source tree that was not installed
        return "0+unknown"


__version__ = _version()
