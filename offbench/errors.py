"""Errors a user can fix: the CLI prints them as one line and exits with code 2."""


class OffbenchError(Exception):
    """Bad input (a file, an id, an option). The message names the thing and the problem."""


class MissingExtraError(OffbenchError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, module: str, extra: str):
        super().__init__(f"'{module}' is not installed; install it with: pip install 'offbench[{extra}]'")


def require(module: str, extra: str):
    """Import an optional dependency lazily, with a message naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtraError(module, extra) from None
