"""Errors of `planner capacity`; all are PlannerError, so the CLI prints them and exits 2."""

from __future__ import annotations

from planner.errors import PlannerError


class CapacitySpecError(PlannerError):
    """A demand, trace or queue file is invalid.  The message names the file, the key and the fix."""

    def __init__(self, path: str, problems: list[str], what: str = "capacity file"):
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: invalid {what}\n{lines}")


class NoOfferError(PlannerError):
    """A GPU class cannot be served at all under the file's clouds, regions and purchase options."""
