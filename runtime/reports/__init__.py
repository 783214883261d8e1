"""Read-only views of a run directory for ``planner status`` and ``planner report``."""
