"""runtime: executes plans (training session, checkpoints, controller, providers)."""
