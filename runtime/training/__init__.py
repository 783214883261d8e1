"""The training session a user's script imports, and what it needs: checkpoints, the
checkpoint store, data order, DDP set-up, preemption handling and the controller contract."""
