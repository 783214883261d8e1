"""Exceptions raised by the planner package, caught once at the CLI edge."""


class PlannerError(Exception):
    """Base class for every user-facing planner failure (exit code 2)."""


class JobSpecError(PlannerError):
    """A job file is invalid.  The message names the file, the key path and the fix."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: invalid job file\n{lines}")


class SolverError(PlannerError):
    """No MILP solver could solve the model (HiGHS and CBC both failed)."""
