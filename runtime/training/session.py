"""The training-session API: DDP, exact resume, checkpoints and preemption in one ``with``.

::

    import runtime

    with runtime.session(model, optimizer, scheduler=sched, dataset=train_set,
                         global_batch=256, micro_batch=64, max_steps=5000, seed=1) as s:
        for x, y in s.batches():
            with s.autocast():
                loss = F.cross_entropy(s.model(x), y)
            s.step(loss)
            if s.rank == 0 and s.global_step % 100 == 0:
                print(s.global_step, s.loss)

What the session does around that loop:

* wraps the model in DDP (gloo on CPU, nccl on GPU) and moves batches to the device;
* feeds each rank its share of a global sample stream (:mod:`runtime.training.data`), and keeps
  the global batch constant at any world size by accumulating gradients;
* seeds torch, ``random`` and numpy from ``(seed, step, slot)`` before every micro-batch,
  where the slot is the micro-batch's place in the global batch, so randomness needs no
  checkpointing and does not depend on the world size;
* on entry, resumes from the newest sound checkpoint: model, optimizer, scheduler, grad
  scaler, step, sample cursor and ``extras``;
* checkpoints asynchronously at the Young/Daly interval (or every N steps), on a
  ``checkpoint`` request, on SIGTERM or a ``stop`` request -- after which it raises
  :class:`~runtime.training.preemption.Preempted` (exit code 75) -- and when the loop ends;
* with ``[tracking]`` in the job, logs the loss, the user's ``s.log({...})`` metrics and danlu's
  spend figures to MLflow, W&B and TensorBoard from rank 0 (:mod:`runtime.tracking`).

The controller configures it through the environment (:mod:`runtime.training.contract`).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from runtime.errors import CheckpointError, CheckpointStorageError, SessionConfigError
from runtime.training import contract, distributed, state_tree
from runtime.training.batching import grad_accumulation
from runtime.training.checkpoint import Checkpointer, SaveInfo, SaveReport
from runtime.training.data import GlobalCursorSampler, build_loader
from runtime.training.interval import IntervalEstimator
from runtime.training.precision import MixedPrecision
from runtime.training.preemption import ControlWatcher, Preempted, StopSignals, agree
from runtime.training.seeding import derive_seed
from runtime.training.store import CheckpointStore

log = logging.getLogger("runtime.training.session")

_RNG_TAG = 0x524E47
DEFAULT_KEEP_LAST = 3


class Session:
    """One training run's view of DDP, data, checkpoints and preemption.

    Use it as a context manager (see the module docstring); the constructor only records
    the configuration, ``__enter__`` joins the process group and resumes.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        dataset: torch.utils.data.Dataset[Any],
        global_batch: int,
        max_steps: int,
        micro_batch: int | None = None,
        scheduler: Any = None,
        seed: int = 0,
        precision: str = "fp32",
        extras: Mapping[str, Any] | None = None,
        checkpoint_dir: str | Path | None = None,
        run_dir: str | Path | None = None,
        keep_last: int = DEFAULT_KEEP_LAST,
        checkpoint_every_steps: int | None = None,
        mtbf_s: float | None = None,
        async_save: bool = True,
        incremental: bool = True,
        device: str | torch.device | None = None,
        shuffle: bool = True,
        collate_fn: Any = None,
        loader_options: dict[str, Any] | None = None,
        max_grad_norm: float | None = None,
        ddp_options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        if max_steps < 0:
            raise SessionConfigError(f"max_steps must be >= 0, got {max_steps}.")
        launch = contract.LaunchContract.from_env(environ)
        self.module = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.dataset = dataset
        self.global_batch = global_batch
        self.max_steps = max_steps
        self.seed = seed
        self.extras: dict[str, Any] = dict(extras or {})
        self._micro_batch_arg = micro_batch
        self._precision_arg = precision
        self._device_arg = device
        self._shuffle = shuffle
        self._collate_fn = collate_fn
        self._loader_options = loader_options
        self._max_grad_norm = max_grad_norm
        self._ddp_options = ddp_options or {}
        self._async_save = async_save
        self._incremental = incremental
        # The controller's environment wins: it decides where checkpoints go.
        root = launch.checkpoint_dir or (str(checkpoint_dir) if checkpoint_dir is not None else None)
        if root is None:
            raise SessionConfigError(
                f"no checkpoint directory. To fix: set {contract.ENV_CHECKPOINT_DIR} or pass checkpoint_dir=."
            )
        self.checkpoint_dir = root
        local_root = "://" not in root or root.startswith("file://")
        default_run_dir = Path(root.removeprefix("file://")) if local_root else Path.cwd() / "danlu-run"
        self.run_dir = Path(launch.run_dir or run_dir or default_run_dir)
        self._resume = launch.resume
        self._attempt = launch.attempt
        self._keep_last = launch.keep_last or keep_last
        self._every_steps = launch.checkpoint_every_steps or checkpoint_every_steps
        mtbf = launch.mtbf_s or mtbf_s
        self._estimator = (
            IntervalEstimator(mtbf, initial_cost_s=launch.checkpoint_cost_s) if mtbf and not self._every_steps else None
        )
        self._timeout_s = launch.pg_timeout_s or timeout_s
        self.global_step = 0
        self.samples_seen = 0
        self.loss: float | None = None
        self.resumed_from: int | None = None
        self.resume_problems: tuple[str, ...] = ()
        self._observed = 0
        self._entered = False
        self._tracking: Any = None

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> Session:
        if self._entered:
            raise SessionConfigError("a Session can be entered once; create a new one for another run.")
        self._entered = True
        self._ctx = distributed.init_distributed(device=self._device_arg, timeout_s=self._timeout_s)
        try:
            self._start()
        except BaseException:
            distributed.shutdown(self._ctx)
            raise
        return self

    def _start(self) -> None:
        ctx = self._ctx
        self.micro_batch = self._micro_batch_arg or self.global_batch // ctx.world_size
        self.grad_accum = grad_accumulation(self.global_batch, self.micro_batch, ctx.world_size)
        self.module.to(ctx.device)
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self.model = DistributedDataParallel(self.module, device_ids=device_ids, **self._ddp_options)
        self._mp = MixedPrecision.create(self._precision_arg, ctx.device)
        self.store = CheckpointStore(self.checkpoint_dir)
        self._checkpointer = Checkpointer(
            self.store,
            rank=ctx.rank,
            process_group=ctx.checkpoint_group,
            keep_last=self._keep_last,
            async_save=self._async_save,
            incremental=self._incremental,
            log_path=self.run_dir / "checkpoints.jsonl",
        )
        ignore_ids = self._resume_from_checkpoint()
        start_position = self.samples_seen
        self._last_save_step = self.global_step if self.resumed_from is not None else -1
        self._last_save_time = time.monotonic()
        self._saved_this_launch = False
        self._save_error: str | None = None
        self._save_write_s: float | None = None  # the longest write of this launch's saves, for status.json
        self._status_checkpoint: str | None = None
        if ctx.rank == 0:
            self._write_status("running", reason=None)
            self._tracking = _open_tracking(self.run_dir, self.resumed_from)
        self._signals = StopSignals()
        self._signals.install()
        self._control = ControlWatcher(self.run_dir / contract.CONTROL_FILE, ignore_ids=ignore_ids)
        self._manual_request = False
        self._stopping: str | None = None
        sampler = GlobalCursorSampler(
            len(self.dataset),  # type: ignore[arg-type]
            seed=self.seed,
            global_batch=self.global_batch,
            micro_batch=self.micro_batch,
            world_size=ctx.world_size,
            rank=ctx.rank,
            start_step=self.global_step,
            stop_step=self.max_steps,
            start_position=start_position,
            shuffle=self._shuffle,
        )
        self._loader = build_loader(
            self.dataset,
            sampler,
            device=ctx.device,
            local_world_size=ctx.local_world_size,
            seed=self.seed,
            collate_fn=self._collate_fn,
            options=self._loader_options,
        )
        self._awaiting_step = False
        self._micro = 0
        self._no_sync: Any = None
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        self._loss_count = 0

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc_type is None:
                self._finish()
            elif isinstance(exc, CheckpointStorageError) and self._ctx.rank == 0:
                self._write_status("failed", reason=str(exc))
        finally:
            self._signals.restore()
            try:
                self._checkpointer.close()
            finally:
                try:
                    if self._tracking is not None:
                        # After the checkpoint: a tracker never delays what a resume needs.
                        self._tracking.close(timeout_s=30.0 if exc_type is None else 10.0)
                finally:
                    distributed.shutdown(self._ctx)

    def _finish(self) -> None:
        if self._stopping is not None and self.global_step < self.max_steps:
            self._preempt()
        self._checkpointer.wait()
        self._observe()
        saved = self.checkpoints and self.checkpoints[-1].ok and self.checkpoints[-1].step == self.global_step
        if self.global_step != self._last_save_step or not (saved or self.resumed_from == self.global_step):
            self._save("final", block=True)
        if self._ctx.rank == 0:
            self._write_status("completed", reason="final")
        dist.barrier(group=self._ctx.control_group)

    # -- properties -----------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._ctx.rank

    @property
    def world_size(self) -> int:
        return self._ctx.world_size

    @property
    def device(self) -> torch.device:
        return self._ctx.device

    @property
    def checkpoints(self) -> list[SaveReport]:
        """Reports of the saves finished so far (byte counts are filled in on rank 0)."""
        return self._checkpointer.reports

    @property
    def interval_s(self) -> float | None:
        """The current Young/Daly interval in seconds (None when step-based or unknown)."""
        return self._estimator.interval_s if self._estimator is not None else None

    # -- the loop ---------------------------------------------------------------------------
    def batches(self) -> Iterator[Any]:
        """Micro-batches on the device, until ``max_steps`` optimizer steps are done.

        Call :meth:`step` once for each. DDP's gradient all-reduce is skipped on all but
        the last micro-batch of an optimizer step.
        """
        micro = 0
        for batch in self._loader:
            if self._stopping is not None:
                self._preempt()
            if self._awaiting_step:
                raise SessionConfigError("s.step(loss) was not called for the previous batch; call it once per batch.")
            self._micro = micro
            self._seed_rng(slot=micro * self.world_size + self.rank)
            if micro < self.grad_accum - 1:
                self._no_sync = self.model.no_sync()
                self._no_sync.__enter__()
            self._awaiting_step = True
            yield _to_device(batch, self.device)
            micro = (micro + 1) % self.grad_accum

    def autocast(self) -> Any:
        """The context for the forward pass: autocast under bf16/fp16, a no-op under fp32."""
        return self._mp.autocast()

    def step(self, loss: torch.Tensor) -> bool:
        """Backpropagate ``loss`` (the mean over this micro-batch) and, on the last
        micro-batch of an optimizer step, step the optimizer and scheduler.

        Returns True when the optimizer stepped (``global_step`` and ``loss`` are then
        updated). At that step boundary the ranks agree on stop/checkpoint requests; a stop saves a
        checkpoint and raises :class:`~runtime.training.preemption.Preempted`.
        """
        if not self._awaiting_step:
            raise SessionConfigError("s.step(loss) was called without a batch from s.batches().")
        self._awaiting_step = False
        self._mp.backward(loss / self.grad_accum)
        if self._no_sync is not None:
            self._no_sync.__exit__(None, None, None)
            self._no_sync = None
        self._loss_sum += loss.detach().to(torch.float64)
        self._loss_count += 1
        if self._micro < self.grad_accum - 1:
            return False
        self._mp.step(self.optimizer, self.model.parameters(), self._max_grad_norm)
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        self.samples_seen += self.global_batch
        self._boundary()
        return True

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log the user's ``metrics`` (name -> number) at ``step`` (default: the current step) to the
        job's trackers, beside danlu's spend figures at that step. Rank 0 logs; other ranks'
        calls are checked and dropped. Without ``[tracking]`` it does nothing."""
        values = {}
        for name, value in metrics.items():
            try:
                values[str(name)] = float(value)
            except (TypeError, ValueError):
                raise SessionConfigError(f"s.log(): metric {name!r} is {value!r}, not a number.") from None
        if self._tracking is not None:
            self._tracking.log(self.global_step if step is None else int(step), values)

    def request_checkpoint(self) -> None:
        """Save at the next step boundary (all ranks follow, whichever rank asked)."""
        self._manual_request = True

    # -- step boundary ------------------------------------------------------------------------
    def _boundary(self) -> None:
        self._checkpointer.poll()
        self._observe()
        request = self._control.poll()
        stop = self._signals.received is not None or (request is not None and request.action == "stop")
        wanted = self._manual_request or (request is not None and request.action == "checkpoint")
        loss_sum, self._loss_sum = self._loss_sum.item(), torch.zeros_like(self._loss_sum)
        count, self._loss_count = self._loss_count, 0
        agreed = agree(
            stop=stop,
            checkpoint=wanted or self._due(),
            loss_sum=loss_sum,
            loss_count=count,
            group=self._ctx.control_group,
            save_failed=self._save_error is not None,
        )
        self.loss = agreed.loss
        if self._tracking is not None:
            self._tracking.on_step(self.global_step, self.loss)
        if self._ctx.rank == 0 and time.monotonic() - self._status_at >= contract.STATUS_HEARTBEAT_S:
            self._write_status("running", reason=None, look_up=False)
        if agreed.save_failed:
            # Every later save would fail the same way (read-only, full, a path too long):
            # training on would only lose the work at the end.
            raise CheckpointStorageError(
                f"checkpoint save failed: {self._save_error or 'on another rank (see its log)'}. To fix: make "
                f"{self.checkpoint_dir} writable with room for a checkpoint, then run again."
            )
        request_id = request.id if request is not None else None
        if agreed.stop:
            # Saved when the next batch is asked for, so the caller's code for this step
            # (logging, metrics) still runs before the process stops.
            self._stopping = request_id or ""
        elif agreed.checkpoint:
            self._manual_request = False
            self._save("request" if wanted else "interval", block=False, request_id=request_id)

    def _preempt(self) -> None:
        request_id = self._stopping or None
        self._save("preempt", block=True, request_id=request_id)
        if self.rank == 0:
            why = f"signal {self._signals.received.name}" if self._signals.received else "stop request"
            self._write_status("preempted", reason=why, request_id=request_id)
        dist.barrier(group=self._ctx.control_group)
        raise Preempted(self.global_step)

    def _due(self) -> bool:
        if self._every_steps is not None:
            return self.global_step - max(self._last_save_step, 0) >= self._every_steps
        if self._estimator is None:
            return False
        interval = self._estimator.interval_s
        if interval is None:
            # C is unknown: an early checkpoint measures it (and proves the storage works). A
            # resumed launch with no interval save on record must take one too, or it never
            # learns C and never saves on schedule.
            return not self._saved_this_launch and self.global_step != self._last_save_step
        return time.monotonic() - self._last_save_time >= interval

    def _save(self, reason: str, *, block: bool, request_id: str | None = None) -> None:
        info = SaveInfo(
            step=self.global_step,
            reason=reason,
            world_size=self.world_size,
            global_batch=self.global_batch,
            samples_seen=self.samples_seen,
            seed=self.seed,
            request_id=request_id,
        )
        self._checkpointer.save(state_tree.flatten(self._state_tree()), info, block=block)
        self._last_save_step = self.global_step
        self._last_save_time = time.monotonic()
        self._saved_this_launch = True
        self._observe()

    def _observe(self) -> None:
        """Feed the saves finished since the last call to the interval estimate."""
        fresh = self._checkpointer.reports[self._observed :]
        self._observed += len(fresh)
        for report in fresh:
            if not report.ok and report.storage and self._save_error is None:
                self._save_error = report.error or "unknown error"
            if report.ok:
                self._save_write_s = max(self._save_write_s or 0.0, report.write_s)
            if report.ok and self._estimator is not None:
                self._estimator.observe(stall_s=report.stall_s, write_s=report.write_s)
                log.debug("checkpoint interval now %.1fs", self._estimator.interval_s)

    def _seed_rng(self, slot: int) -> None:
        # The slot is the micro-batch's place in the global batch, not the rank: the same
        # samples get the same dropout masks at any world size.
        seed = derive_seed(self.seed, _RNG_TAG, self.global_step, slot)
        torch.manual_seed(seed)
        random.seed(seed)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(seed % 2**32)

    # -- state ------------------------------------------------------------------------------
    def _state_tree(self) -> dict[str, Any]:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        tree: dict[str, Any] = {
            "model": model_state,
            "optim": optim_state,
            "progress": {
                "step": self.global_step,
                "samples_seen": self.samples_seen,
                "global_batch": self.global_batch,
                "seed": self.seed,
            },
        }
        if self.scheduler is not None:
            tree["scheduler"] = self.scheduler.state_dict()
        if self._mp.scaler is not None:
            tree["scaler"] = self._mp.scaler.state_dict()
        if self.extras:
            tree["extras"] = {
                name: value.state_dict() if _is_stateful(value) else value for name, value in self.extras.items()
            }
        return tree

    def _resume_from_checkpoint(self) -> tuple[str, ...]:
        decision: list[Any] = [None]
        if self.rank == 0:
            try:
                selection = self.store.select(self._resume)
                for step, why in selection.discard:
                    self.store.discard(step, why)
                decision[0] = ("ok", selection.step, selection.problems, self._save_cost_on_record(selection.step))
            except CheckpointError as exc:
                decision[0] = ("error", str(exc), (), None)
        dist.broadcast_object_list(decision, src=0, group=self._ctx.control_group)
        verdict, value, problems, cost = decision[0]
        if verdict == "error":
            raise CheckpointError(value)
        if cost is not None and self._estimator is not None:
            # Every rank the same estimate: each votes on whether a save is due.
            self._estimator.observe(stall_s=cost[0], write_s=cost[1])
        self.resume_problems = tuple(problems)
        for problem in problems:
            log.warning("resume: %s", problem)
        if value is None:
            return ()
        tree = self._state_tree()
        flat = state_tree.flatten(tree)
        manifest = self._checkpointer.load(flat, value)
        self._restore(state_tree.rebuild(tree, flat))
        self.resumed_from = value
        if manifest.global_batch != self.global_batch:
            log.warning(
                "global batch changed from %d to %d at step %d; adjust the learning rate if needed",
                manifest.global_batch, self.global_batch, value,
            )
        log.info(
            "resumed from %s (step %d, %d samples seen)", self.store.url(value), self.global_step, self.samples_seen
        )
        previous = contract.read_status(self.run_dir) if self.rank == 0 else None
        ids = [manifest.request_id, previous.request_id if previous is not None else None]
        return tuple(i for i in ids if i)

    def _save_cost_on_record(self, resumed_step: int | None) -> tuple[float, float] | None:
        """(stall_s, write_s) of the newest interval or requested save the run has committed.

        A resumed launch that learns C this way keeps its first save on schedule; without it
        the launch saves one step after resuming, and a preemption notice that comes in the
        first seconds (the usual case right after a re-plan onto spot) queues its stop save
        behind that write. Only saves taken while training count: a stop's save blocks
        training for the whole write, which is not what an interval save costs.
        """
        if resumed_step is None or self._estimator is None or self._estimator.cost_s is not None:
            return None
        manifest = self.store.newest_manifest(up_to=resumed_step, reasons=("interval", "request"))
        if manifest is None or not manifest.write_s > 0:
            return None
        log.info("checkpoint cost from step %d: %.3fs stall, %.3fs write", manifest.step, manifest.stall_s,
                 manifest.write_s)
        return manifest.stall_s, manifest.write_s

    def _restore(self, tree: dict[str, Any]) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=tree["model"], optim_state_dict=tree["optim"])
        progress = tree["progress"]
        self.global_step = int(progress["step"])
        self.samples_seen = int(progress["samples_seen"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(tree["scheduler"])
        if self._mp.scaler is not None:
            self._mp.scaler.load_state_dict(tree["scaler"])
        for name, value in tree.get("extras", {}).items():
            if _is_stateful(self.extras[name]):
                self.extras[name].load_state_dict(value)
            else:
                self.extras[name] = value

    def _write_status(self, state: contract.RunState, *, reason: str | None, request_id: str | None = None,
                      look_up: bool = True) -> None:
        """``look_up=False`` (a heartbeat) reports the checkpoint the last status named: listing an
        object store every few seconds from the training loop would cost more than it tells."""
        if look_up:
            committed = self.store.latest_step()
            self._status_checkpoint = self.store.url(committed) if committed is not None else None
        self._status_at = time.monotonic()
        contract.write_status(
            self.run_dir,
            contract.RunStatus(
                state=state,
                step=self.global_step,
                attempt=self._attempt,
                checkpoint=self._status_checkpoint,
                reason=reason,
                world_size=self.world_size,
                request_id=request_id,
                problems=self.resume_problems,
                heartbeat_s=contract.STATUS_HEARTBEAT_S,
                save_write_s=self._save_write_s,
                max_steps=self.max_steps,
            ),
        )


def _open_tracking(run_dir: Path, resumed_from: int | None) -> Any:
    """The trackers the controller named (``DANLU_TRACKING``), started in the background; else None."""
    from runtime.tracking import ENV_TRACKING

    if not os.environ.get(ENV_TRACKING):
        return None  # no import at all for the runs that track nothing
    from runtime.tracking.session_hook import open_for_session

    return open_for_session(run_dir, resumed_step=resumed_from)


def _is_stateful(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=batch.is_pinned())
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [_to_device(v, device) for v in batch]
        return moved if isinstance(batch, list) else tuple(moved)
    return batch


def session(model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any) -> Session:
    """Open a :class:`Session` (use it with ``with``); see the module docstring."""
    return Session(model, optimizer, **options)


class _CallableModule(types.ModuleType):
    # ``runtime.session`` (``runtime.training.session``) is this module once it is imported, yet the
    # documented API is ``runtime.session(model, ...)``:
    # making the module callable keeps both spellings working.
    def __call__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any) -> Session:
        return session(model, optimizer, **options)


sys.modules[__name__].__class__ = _CallableModule
