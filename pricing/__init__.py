"""pricing: what GPU capacity costs and how fast it trains (depends on neither planner nor runtime)."""
