"""Helpers shared by planner/, pricing/ and runtime/ (they depend on nothing of danlu's)."""
