"""Two torchrun workers where rank 0 fails on a bug after the process group is up: rank 1 then fails
too, on the broken connection, and its traceback comes later in the node's log."""

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    raise RuntimeError("bad batch shape [3, 32] for a model of width 64")
dist.barrier()  # fails: rank 0 is gone
