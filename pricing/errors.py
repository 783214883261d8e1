"""Exceptions raised by the pricing package.

The CLI catches :class:`PricingError` once and prints its message; nothing below the
CLI prints or exits.  Messages name the file or cloud and say how to fix the problem.
"""


class PricingError(Exception):
    """Base class for every user-facing pricing failure (exit code 2)."""


class CatalogFormatError(PricingError):
    """A catalog file is unreadable or malformed (names the file, row and column)."""


class UnknownModelError(PricingError):
    """A workload names a model the throughput table does not know."""
