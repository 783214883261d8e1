"""planner: job specs, the MILP optimizer, quotes, simulation and capacity planning."""

__version__ = "0.1.0"
