"""Exceptions raised by the runtime package, caught once at the CLI edge."""


class RuntimeFailure(Exception):
    """Base class for every user-facing runtime failure (exit code 2)."""


class CheckpointError(RuntimeFailure):
    """A checkpoint could not be written, or none usable could be read."""
