"""The controller behind ``planner run``: its durable state, events, re-planning and chaos."""
