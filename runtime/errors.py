"""Exceptions raised by the runtime package, caught once at the CLI edge."""


class RuntimeFailure(Exception):
    """Base class for every user-facing runtime failure (exit code 2)."""


class CheckpointError(RuntimeFailure):
    """A checkpoint could not be written, or none usable could be read."""


class CheckpointStorageError(CheckpointError):
    """The checkpoint store refused a write (read-only, full, a path too long): every later
    save would fail the same way, unlike a save cut short by a peer that went away."""


class ContractError(RuntimeFailure):
    """The launch environment or a run-directory file breaks the controller contract.

    The message names the variable or file, the bad value and the fix.
    """


class SessionConfigError(RuntimeFailure):
    """A training session was configured inconsistently (batch sizes, precision, devices)."""
