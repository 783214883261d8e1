"""Saving and loading a flat training state with torch.distributed.checkpoint (DCP).

A :class:`Checkpointer` writes each checkpoint into a fresh ``step-N/`` directory of a
:class:`~runtime.training.store.CheckpointStore`, asynchronously by default: ``save`` returns once
the state is staged to CPU memory and training goes on while a background thread writes,
then rank 0 digests the files and commits the manifest, then prunes. Only one save is in
flight at a time; the next ``save`` waits for the previous commit.

Saves are incremental: a tensor whose content digest equals the one recorded at the last
commit (a frozen layer while fine-tuning) is left out, and the manifest points at the step
directory that already holds it. Tensors whose autograd version counter moved since the
last save are known to have been modified and are written without hashing.

Every rank calls ``save`` and ``load`` for the same step (they are collectives on the
dedicated checkpoint process group, kept apart from training collectives so a background
write never interleaves with them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from runtime.errors import CheckpointError, CheckpointStorageError
from runtime.training.store import CheckpointStore, Manifest, TensorRecord

log = logging.getLogger("runtime.training.checkpoint")

# DCP reports rank failures as CheckpointException, which derives from BaseException.
_SAVE_ERRORS = (Exception, CheckpointException)


@dataclass(frozen=True)
class SaveInfo:
    """What a checkpoint records about the run besides its tensors."""

    step: int
    reason: str
    world_size: int
    global_batch: int
    samples_seen: int
    seed: int
    request_id: str | None = None


@dataclass(frozen=True)
class SaveReport:
    """The outcome of one save, as appended to ``checkpoints.jsonl`` by rank 0."""

    step: int
    reason: str
    ok: bool
    stall_s: float
    write_s: float
    bytes_written: int = 0
    bytes_reused: int = 0
    tensors_written: int = 0
    tensors_reused: int = 0
    pruned: tuple[int, ...] = ()
    error: str | None = None
    storage: bool = False  # the store refused the write (see is_storage_error), not a peer or a timeout


@dataclass
class _Pending:
    info: SaveInfo
    started: float
    stall_s: float
    records: dict[str, TensorRecord]
    bytes_reused: int
    tensors_written: int
    future: Future[Any] | None


class Checkpointer:
    """Asynchronous, incremental DCP saves into a :class:`CheckpointStore`."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        rank: int,
        process_group: dist.ProcessGroup | None,
        keep_last: int = 3,
        async_save: bool = True,
        incremental: bool = True,
        log_path: str | Path | None = None,
    ):
        if keep_last < 1:
            raise CheckpointError(f"keep_last must be >= 1, got {keep_last}. To fix: keep at least one checkpoint.")
        self.store = store
        self.rank = rank
        self.keep_last = keep_last
        self.async_save = async_save
        self.incremental = incremental
        self._pg = process_group
        self._log_path = Path(log_path) if log_path is not None and rank == 0 else None
        self._records: dict[str, TensorRecord] = {}
        self._versions: dict[str, int] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="danlu-ckpt")
        self._inflight: Future[SaveReport] | None = None
        self.reports: list[SaveReport] = []
        """Every finished save, in order (rank 0's carry byte counts)."""

    # -- saving -------------------------------------------------------------------------
    def save(self, state: dict[str, Any], info: SaveInfo, *, block: bool = False) -> SaveReport | None:
        """Save ``state`` (flat, see :mod:`runtime.training.state_tree`) as ``step-{info.step}``.

        Returns the report when ``block`` (or when the writer is synchronous); otherwise
        None, and the report comes from a later :meth:`poll` or :meth:`wait` (the session
        stops training at the first failed one).

        Raises:
            CheckpointError: the step directory cannot be made, or a blocking save failed.
        """
        started = time.monotonic()
        self.wait()
        if self.rank == 0:
            try:
                self.store.prepare(info.step)
            except _SAVE_ERRORS as exc:  # a read-only or full store, a path too long: say so, once
                report = self._failed(_Pending(info, started, 0.0, {}, 0, 0, None), exc)
                self.reports.append(report)
                raise _save_error(report, self.store.url(info.step)) from exc
        if self._pg is not None:
            # Nobody may create step-N/ before rank 0 has cleared a leftover of it.
            dist.barrier(group=self._pg)
        to_write, records, bytes_reused = self._select(state, info.step)
        pending = _Pending(info, started, 0.0, records, bytes_reused, len(to_write), None)
        writer = _writer(self.store.url(info.step))
        if self.async_save and not block:
            pending.future = dcp.async_save(to_write, storage_writer=writer, process_group=self._pg)
            pending.stall_s = time.monotonic() - started
            self._inflight = self._executor.submit(self._finish, pending)
            return None
        try:
            dcp.save(to_write, storage_writer=writer, process_group=self._pg)
        except _SAVE_ERRORS as exc:
            report = self._failed(pending, exc)
        else:
            pending.stall_s = time.monotonic() - started
            report = self._finish(pending)
        self.reports.append(report)
        if block and not report.ok:
            raise _save_error(report, self.store.url(info.step))
        return report

    def _select(self, state: dict[str, Any], step: int) -> tuple[dict[str, Any], dict[str, TensorRecord], int]:
        to_write: dict[str, Any] = {}
        records: dict[str, TensorRecord] = {}
        bytes_reused = 0
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                to_write[key] = value
                continue
            digest = None
            if self.incremental and self._versions.get(key, value._version) == value._version:
                digest = tensor_digest(value)
            self._versions[key] = value._version
            previous = self._records.get(key)
            if digest is not None and previous is not None and previous.digest == digest:
                records[key] = previous
                bytes_reused += value.numel() * value.element_size()
            else:
                records[key] = TensorRecord(home=step, digest=digest)
                to_write[key] = value
        return to_write, records, bytes_reused

    def _finish(self, pending: _Pending) -> SaveReport:
        info = pending.info
        try:
            if pending.future is not None:
                pending.future.result()
            write_s = time.monotonic() - pending.started
            report = SaveReport(
                step=info.step,
                reason=info.reason,
                ok=True,
                stall_s=pending.stall_s,
                write_s=write_s,
                bytes_reused=pending.bytes_reused,
                tensors_written=sum(1 for r in pending.records.values() if r.home == info.step),
                tensors_reused=sum(1 for r in pending.records.values() if r.home != info.step),
            )
            if self.rank == 0:
                report = self._commit(pending, report)
        except _SAVE_ERRORS as exc:
            return self._failed(pending, exc)
        self._records = pending.records
        return report

    def _commit(self, pending: _Pending, report: SaveReport) -> SaveReport:
        info = pending.info
        files = self.store.digest_files(info.step)
        manifest = Manifest(
            step=info.step,
            world_size=info.world_size,
            global_batch=info.global_batch,
            samples_seen=info.samples_seen,
            seed=info.seed,
            reason=info.reason,
            files=files,
            tensors=pending.records,
            bytes_written=sum(f.size for f in files.values()),
            stall_s=round(report.stall_s, 6),
            write_s=round(report.write_s, 6),
            request_id=info.request_id,
        )
        self.store.commit(manifest)
        pruned = tuple(self.store.prune(self.keep_last))
        report = SaveReport(**{**asdict(report), "bytes_written": manifest.bytes_written, "pruned": pruned})
        log.info(
            "checkpoint %s committed: %d bytes written, %d reused, stall %.3fs, durable after %.3fs",
            self.store.url(info.step), report.bytes_written, report.bytes_reused, report.stall_s, report.write_s,
        )
        self._append_log(report)
        return report

    def _failed(self, pending: _Pending, exc: BaseException) -> SaveReport:
        report = SaveReport(
            step=pending.info.step,
            reason=pending.info.reason,
            ok=False,
            stall_s=pending.stall_s,
            write_s=time.monotonic() - pending.started,
            error=f"{type(exc).__name__}: {exc}",
            storage=is_storage_error(exc),
        )
        log.error("checkpoint %s failed: %s", self.store.url(pending.info.step), report.error)
        if self.rank == 0:
            self._append_log(report)
        return report

    def _append_log(self, report: SaveReport) -> None:
        if self._log_path is None:
            return
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(report)) + "\n")

    def poll(self) -> SaveReport | None:
        """The report of the in-flight save if it has finished, without waiting."""
        if self._inflight is not None and self._inflight.done():
            return self.wait()
        return None

    def wait(self) -> SaveReport | None:
        """Wait for the in-flight save (if any) to be committed and return its report."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return None
        report = inflight.result()
        self.reports.append(report)
        return report

    def close(self) -> None:
        """Finish the in-flight save and stop the background thread."""
        self.wait()
        self._executor.shutdown(wait=True)

    # -- loading ------------------------------------------------------------------------
    def load(self, state: dict[str, Any], step: int) -> Manifest:
        """Load ``step`` into ``state`` (flat): tensors in place, other leaves replaced.

        Unchanged tensors are read from the step directory that holds them. Afterwards
        the next save compares against this checkpoint's digests.

        Raises:
            CheckpointError: the checkpoint does not match ``state`` (a key is missing or a
                shape differs), naming the checkpoint and what to do.
        """
        manifest = self.store.read_manifest(step)
        by_home: dict[int, dict[str, Any]] = {}
        for key, value in state.items():
            record = manifest.tensors.get(key)
            by_home.setdefault(record.home if record is not None else step, {})[key] = value
        for home, part in sorted(by_home.items()):
            try:
                dcp.load(part, storage_reader=_reader(self.store.url(home)), process_group=self._pg)
            except _SAVE_ERRORS as exc:
                raise CheckpointError(
                    f"could not load {self.store.url(home)} into this run: {exc}\n"
                    "To fix: resume with the same model, optimizer, scheduler and extras that "
                    "saved it, or set DANLU_RESUME=none to start over."
                ) from exc
            state.update(part)
        self._records = dict(manifest.tensors)
        self._versions = {}
        return manifest


def is_storage_error(exc: BaseException) -> bool:
    """True when the store itself refused (an OSError that is not a broken connection or a timeout),
    looking through DCP's per-rank CheckpointException and the exception chain."""
    seen: list[BaseException] = [exc]
    while seen:
        current = seen.pop()
        if isinstance(current, OSError) and not isinstance(current, (ConnectionError, TimeoutError)):
            return True
        for wrapped in getattr(current, "failures", {}).values() if isinstance(current, CheckpointException) else ():
            seen.append(wrapped[0] if isinstance(wrapped, tuple) else wrapped)
        seen.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def _save_error(report: SaveReport, url: str) -> CheckpointError:
    kind = CheckpointStorageError if report.storage else CheckpointError
    return kind(f"could not save {url}: {report.error}")


def tensor_digest(tensor: torch.Tensor) -> str:
    """BLAKE2b of a tensor's bytes (its dtype and shape included)."""
    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
    digest = hashlib.blake2b(f"{tensor.dtype}{tuple(tensor.shape)}".encode(), digest_size=16)
    digest.update(memoryview(data))
    return digest.hexdigest()


def _writer(url: str) -> Any:
    if "://" in url and not url.startswith("file://"):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(url, sync_files=True, overwrite=False)
    return dcp.FileSystemWriter(url.removeprefix("file://"), sync_files=True, overwrite=False)


def _reader(url: str) -> Any:
    if "://" in url and not url.startswith("file://"):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(url)
    return dcp.FileSystemReader(url.removeprefix("file://"))
