"""Error types that map to kvgate's exit codes.

Exit codes are a contract: 0 pass/fits, 1 check failed or plan does not fit,
2 bad input, 3 infrastructure failure (server failed to start or died).
"""

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_INPUT = 2
EXIT_INFRA = 3


class KvgateError(Exception):
    """Base class; ``exit_code`` says how the CLI ends."""

    exit_code = EXIT_INPUT


class InputError(KvgateError):
    """Bad user input: one line naming the field and the fix."""

    exit_code = EXIT_INPUT


class NotModelled(InputError):
    """A model feature the planner refuses to answer rather than guess."""

    def __init__(self, what: str):
        super().__init__(f"not modelled: {what}")


class InfraError(KvgateError):
    """The server could not be started, died, or stopped answering."""

    exit_code = EXIT_INFRA


def one_line(message: str) -> str:
    """The message on one printable line: user-supplied text can hold newlines or control bytes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))
