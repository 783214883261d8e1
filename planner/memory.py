"""GPU memory a training configuration needs, by parallelism strategy.

The rule (docs/quote.md, "Memory by parallelism", gives the sources):

* **Model states** (Rajbhandari et al., "ZeRO", SC'20, section 3.1): mixed-precision Adam keeps
  2 bytes of 16-bit weights, 2 of 16-bit gradients and 12 of fp32 optimizer state (master
  weights, momentum, variance) per parameter; pure fp32 training keeps 4 + 4 + 8.  Tensor
  parallelism of degree ``t`` (Megatron-LM, within one node) splits every one of them by
  ``t``; the data-parallel degree is ``N = GPUs / t``, and the strategy shards across it:
  ``ddp`` nothing, ``zero2`` gradients and optimizer state, ``fsdp``/``zero3`` all three.
* **Activations**: ``activation_gb`` when the job gives it; else full activation checkpointing
  (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
  MLSys'23, section 4): the 16-bit input of every layer, ``2 s b h L`` bytes, plus the working
  set of the one layer being recomputed, ``34 s b h`` bytes, both divided by ``t`` (sequence
  parallelism).  ``s b`` is ``micro_batch_tokens``; the depth ``L`` and width ``h`` follow from
  the parameter count with the GPT shape ``params = 12 L h^2`` (Kaplan et al. 2020) and
  ``h = 128 L`` (GPT-3 2.7B-175B, Llama 2 7B/13B: 32x4096, 40x5120, 96x12288).
* **Overhead**: a fixed ``OVERHEAD_GB`` per GPU for the CUDA context, NCCL buffers and the
  allocator's fragmentation.

Pure functions of the job's ``[workload]`` keys; ``tests/planner/bruteforce.py`` re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
STATE_BYTES = {
    # precision: (weights, gradients, optimizer state) bytes per parameter, Adam
    "bf16": (2, 2, 12),
    "fp16": (2, 2, 12),
    "fp32": (4, 4, 8),
}
ACTIVATION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
STRATEGIES = ("ddp", "zero2", "zero3", "fsdp")
OVERHEAD_GB = 2.0
"""CUDA context (~0.5-1 GB with cuDNN/cuBLAS workspaces), NCCL buffers and allocator fragmentation."""
WIDTH_PER_LAYER = 128
LAYER_WORKING_SET = 34  # bytes per token per unit of width for one layer's activations (Korthikanti et al.)


@dataclass(frozen=True, slots=True)
class MemoryRule:
    """A workload's memory model: ``need_gb(gpus)`` per GPU for a configuration of ``gpus`` GPUs."""

    params_billions: float
    precision: str = "bf16"
    strategy: str = "fsdp"
    tensor_parallel: int = 1
    activation_gb: float | None = None
    micro_batch_tokens: float = 4096

    def shape(self) -> tuple[float, float]:
        """(layers, width) of a GPT-shaped model of this size."""
        layers = (self.params_billions * 1e9 / (12 * WIDTH_PER_LAYER**2)) ** (1 / 3)
        return layers, WIDTH_PER_LAYER * layers

    def states_gb(self, gpus: int) -> float:
        """Weights, gradients and optimizer state held by one GPU."""
        w, g, o = STATE_BYTES[self.precision]
        per_tp = self.params_billions * 1e9 / self.tensor_parallel
        dp = max(gpus // self.tensor_parallel, 1)
        if self.strategy == "ddp":
            held = (w + g + o) * per_tp
        elif self.strategy == "zero2":
            held = w * per_tp + (g + o) * per_tp / dp
        else:  # fsdp / zero3
            held = (w + g + o) * per_tp / dp
        return held / GB

    def activations_gb(self) -> float:
        if self.activation_gb is not None:
            return self.activation_gb
        layers, width = self.shape()
        tokens = self.micro_batch_tokens
        stored = ACTIVATION_BYTES[self.precision] * tokens * width * layers
        working = LAYER_WORKING_SET * tokens * width
        return (stored + working) / self.tensor_parallel / GB

    def need_gb(self, gpus: int) -> float:
        """GB per GPU on a configuration of ``gpus`` GPUs (a multiple of ``tensor_parallel``)."""
        return self.states_gb(gpus) + self.activations_gb() + OVERHEAD_GB

    def fits(self, gpus: int, gpus_per_node: int, gpu_memory_gb: float) -> bool:
        """Whether ``gpus`` GPUs of ``gpu_memory_gb`` each, ``gpus_per_node`` to a node, can run it:
        tensor parallelism stays within a node, so it must divide the node's GPUs."""
        if gpus_per_node % self.tensor_parallel:
            return False
        return self.need_gb(gpus) <= gpu_memory_gb + 1e-9

    def min_gpus(self, gpu_memory_gb: float, *, limit: int = 1 << 20) -> int | None:
        """The fewest GPUs (a multiple of ``tensor_parallel``) whose per-GPU need fits, or None."""
        t = self.tensor_parallel
        if self.need_gb(limit) > gpu_memory_gb + 1e-9:
            return None
        lo, hi = 1, limit // t  # in units of t GPUs; need_gb never grows with more GPUs
        while lo < hi:
            mid = (lo + hi) // 2
            if self.need_gb(mid * t) <= gpu_memory_gb + 1e-9:
                hi = mid
            else:
                lo = mid + 1
        return lo * t

    def describe(self, gpus: int) -> str:
        return (f"{self.params_billions:g}B params, {self.precision}, {self.strategy}"
                + (f", tensor parallel {self.tensor_parallel}" if self.tensor_parallel > 1 else "")
                + f": {self.need_gb(gpus):.1f} GB per GPU at {gpus} GPUs "
                f"(states {self.states_gb(gpus):.1f}, activations {self.activations_gb():.1f}, "
                f"overhead {OVERHEAD_GB:g})")
