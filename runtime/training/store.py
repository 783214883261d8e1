"""The checkpoint directory: ``step-N/`` layout, the commit rule, verification and pruning.

No torch here (only fsspec), so the controller can find the latest checkpoint cheaply.

Layout under the root (a local path or an fsspec URL)::

    step-120/.metadata         DCP's own metadata, renamed into place after the data files
    step-120/__0_0.distcp      one data file per rank
    step-120/manifest.json     ours, written last: the commit marker
    discarded/step-130.corrupt-1732960000   set aside on resume for a human to inspect

A checkpoint is *committed* when ``manifest.json`` exists. Rank 0 writes it only after
every rank's data and DCP's ``.metadata`` are durable, so a directory without one is a save
interrupted mid-write and is never loaded. (Scripts that do not use the session follow the
same rule with a manifest of their own; see ``docs/runtime.md``.) The manifest
records the size and BLAKE2b digest of every file, so a committed checkpoint that was
damaged later (truncated, bit-flipped) is detected before it is loaded, and the previous
one is used instead.

Incremental checkpoints: a tensor unchanged since the previous checkpoint is not written
again; the manifest names the step directory (its *home*) that holds it. Pruning keeps
every home that a kept checkpoint refers to.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from danlu import atomic_file
from runtime.errors import CheckpointError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

    from runtime.training.contract import Resume

STEP_PREFIX = "step-"
MANIFEST_FILE = "manifest.json"
DISCARDED_DIR = "discarded"
MANIFEST_FORMAT = 1
_CHUNK = 4 << 20


@dataclass(frozen=True)
class FileRecord:
    """Size and digest of one file of a checkpoint, taken when it was committed."""

    size: int
    blake2b: str


@dataclass(frozen=True)
class TensorRecord:
    """Where a saved tensor lives (its home step) and its content digest, when hashed."""

    home: int
    digest: str | None = None


@dataclass(frozen=True)
class Manifest:
    """The commit record of one checkpoint (``step-N/manifest.json``)."""

    step: int
    world_size: int
    global_batch: int
    samples_seen: int
    seed: int
    reason: str
    files: dict[str, FileRecord]
    tensors: dict[str, TensorRecord]
    bytes_written: int
    stall_s: float = 0.0
    write_s: float = 0.0
    request_id: str | None = None
    created_at: float = field(default_factory=time.time)
    format: int = MANIFEST_FORMAT

    @property
    def homes(self) -> set[int]:
        """Other step directories this checkpoint reads tensors from."""
        return {record.home for record in self.tensors.values()} - {self.step}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {data.get('format')!r}")
        data["files"] = {name: FileRecord(**rec) for name, rec in data["files"].items()}
        data["tensors"] = {key: TensorRecord(**rec) for key, rec in data["tensors"].items()}
        return cls(**data)


@dataclass(frozen=True)
class Selection:
    """Which checkpoint to resume from, and what to set aside first."""

    step: int | None
    problems: tuple[str, ...] = ()
    discard: tuple[tuple[int, str], ...] = ()


class CheckpointStore:
    """``step-N/`` checkpoints under one root, on local disk or any fsspec filesystem."""

    def __init__(self, root: str):
        import fsspec.core

        self.root = root.rstrip("/") or "/"
        self.fs: AbstractFileSystem
        # The commit rule needs what the store holds now: an object store's cached listings go stale
        # (other machines commit here; s3fs and gcsfs keep listings forever by default, and adlfs
        # 2026.8 invalidates the wrong key after a write, so a fresh manifest.json read "not found").
        protocol = fsspec.core.split_protocol(self.root)[0]
        options = {} if protocol in (None, "file", "local") else {"use_listings_cache": False}
        self.fs, self._path = fsspec.core.url_to_fs(self.root, **options)
        self.is_local = "file" in _protocols(self.fs)

    def url(self, step: int) -> str:
        """The checkpoint id DCP gets for ``step`` (keeps the root's URL scheme)."""
        return f"{self.root}/{STEP_PREFIX}{step}"

    def _dir(self, step: int) -> str:
        return posixpath.join(self._path, f"{STEP_PREFIX}{step}")

    def step_dirs(self) -> list[int]:
        """Steps that have a directory, committed or not, in ascending order."""
        if not self.fs.exists(self._path):
            return []
        steps = []
        for entry in self.fs.ls(self._path, detail=False):
            name = posixpath.basename(entry.rstrip("/"))
            if name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX) :].isdigit():
                steps.append(int(name[len(STEP_PREFIX) :]))
        return sorted(steps)

    def is_committed(self, step: int) -> bool:
        """True once ``step-N/manifest.json`` exists (the manifest is written last)."""
        return self.fs.exists(posixpath.join(self._dir(step), MANIFEST_FILE))

    def committed_steps(self) -> list[int]:
        """Committed steps in ascending order; the last is the latest checkpoint."""
        return [step for step in self.step_dirs() if self.is_committed(step)]

    def latest_step(self) -> int | None:
        """The highest committed step, or None when there is no checkpoint."""
        committed = self.committed_steps()
        return committed[-1] if committed else None

    def read_manifest(self, step: int) -> Manifest:
        """Raises CheckpointError when the manifest is missing or unreadable."""
        path = posixpath.join(self._dir(step), MANIFEST_FILE)
        try:
            with self.fs.open(path, "rb") as f:
                return Manifest.from_json(f.read().decode("utf-8"))
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self.url(step)} is not committed (no {MANIFEST_FILE}).") from exc
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{self.url(step)}/{MANIFEST_FILE} is unreadable: {exc}") from exc

    def newest_manifest(self, *, up_to: int, reasons: Collection[str]) -> Manifest | None:
        """The newest readable manifest at or before step ``up_to`` saved for one of ``reasons``."""
        for step in reversed(self.committed_steps()):
            if step > up_to:
                continue
            try:
                manifest = self.read_manifest(step)
            except CheckpointError:
                continue
            if manifest.reason in reasons:
                return manifest
        return None

    def digest_files(self, step: int) -> dict[str, FileRecord]:
        """Size and BLAKE2b digest of every file in ``step-N/`` except the manifest."""
        records = {}
        for entry in self.fs.ls(self._dir(step), detail=False):
            name = posixpath.basename(entry.rstrip("/"))
            if name != MANIFEST_FILE:
                records[name] = self._digest(posixpath.join(self._dir(step), name))
        return records

    def _digest(self, path: str) -> FileRecord:
        digest = hashlib.blake2b(digest_size=16)
        size = 0
        with self.fs.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return FileRecord(size=size, blake2b=digest.hexdigest())

    def commit(self, manifest: Manifest) -> None:
        """Write ``manifest.json`` last, atomically: from now on the checkpoint exists."""
        path = posixpath.join(self._dir(manifest.step), MANIFEST_FILE)
        if self.is_local:
            atomic_file.write_text(path, manifest.to_json())
        else:
            # An object PUT is atomic; there is no rename to do.
            self.fs.pipe_file(path, manifest.to_json().encode("utf-8"))

    def verify(self, step: int) -> list[str]:
        """Problems that make ``step`` unloadable (empty when it is sound).

        Checks the manifest, then every file's size and digest, in this checkpoint and in
        the older ones it takes unchanged tensors from.
        """
        try:
            manifest = self.read_manifest(step)
        except CheckpointError as exc:
            return [str(exc)]
        problems = self._verify_files(step, manifest)
        for home in sorted(manifest.homes):
            if not self.is_committed(home):
                problems.append(f"{self.url(step)} needs tensors from {self.url(home)}, which is not committed")
                continue
            try:
                problems += self._verify_files(home, self.read_manifest(home))
            except CheckpointError as exc:
                problems.append(str(exc))
        return problems

    def _verify_files(self, step: int, manifest: Manifest) -> list[str]:
        problems = []
        for name, expected in sorted(manifest.files.items()):
            path = posixpath.join(self._dir(step), name)
            try:
                actual = self._digest(path)
            except FileNotFoundError:
                problems.append(f"{self.url(step)}/{name} is missing")
                continue
            if actual.size != expected.size:
                problems.append(f"{self.url(step)}/{name} has {actual.size} bytes, {expected.size} were written")
            elif actual.blake2b != expected.blake2b:
                problems.append(f"{self.url(step)}/{name} does not match its digest (corrupted)")
        return problems

    def select(self, resume: Resume) -> Selection:
        """Choose the checkpoint to resume from according to ``DANLU_RESUME``.

        ``latest`` walks back from the newest committed step to the first that verifies,
        reporting each one skipped. Everything newer than the choice is to be discarded,
        because the resumed run will write those steps again.

        Raises:
            CheckpointError: a requested step is unusable, or checkpoints exist but none
                verifies (starting over silently would throw away the run's progress).
        """
        dirs = self.step_dirs()
        committed = [s for s in dirs if self.is_committed(s)]
        problems: list[str] = []
        verdicts: dict[int, list[str]] = {}
        chosen: int | None = None
        if resume == "latest":
            for step in reversed(committed):
                verdicts[step] = self.verify(step)
                if not verdicts[step]:
                    chosen = step
                    break
                problems.append(f"skipped {self.url(step)}: " + "; ".join(verdicts[step]))
            if chosen is None and committed:
                raise CheckpointError(
                    f"no checkpoint under {self.root} is usable:\n  " + "\n  ".join(problems) + "\n"
                    "To fix: restore a good copy, or set DANLU_RESUME=none to start the run over."
                )
        elif isinstance(resume, int):
            verdicts[resume] = self.verify(resume) if resume in committed else ["not committed"]
            if verdicts[resume]:
                raise CheckpointError(
                    f"cannot resume from {self.url(resume)}: " + "; ".join(verdicts[resume]) + ". "
                    f"To fix: set DANLU_RESUME to one of the committed steps {committed} or to 'latest'."
                )
            chosen = resume
        discard = []
        for step in dirs:
            if chosen is not None and step <= chosen:
                continue
            if step not in committed:
                why = "partial"
                problems.append(f"{self.url(step)} was never committed (a save interrupted mid-write)")
            elif verdicts.get(step):
                why = "corrupt"
            else:
                why = "superseded"
            discard.append((step, why))
        return Selection(step=chosen, problems=tuple(problems), discard=tuple(discard))

    def discard(self, step: int, why: str) -> None:
        """Remove a partial save; move any other checkpoint to ``discarded/`` for inspection."""
        source = self._dir(step)
        if why == "partial":
            self.fs.rm(source, recursive=True)
            return
        target_dir = posixpath.join(self._path, DISCARDED_DIR)
        self.fs.makedirs(target_dir, exist_ok=True)
        self.fs.mv(source, posixpath.join(target_dir, f"{STEP_PREFIX}{step}.{why}-{int(time.time())}"), recursive=True)

    def prepare(self, step: int) -> None:
        """Make sure ``step-N/`` does not exist before DCP writes into it."""
        if self.fs.exists(self._dir(step)):
            if self.is_committed(step):
                raise CheckpointError(
                    f"{self.url(step)} is already committed; refusing to overwrite it. To fix: "
                    "resume from it (DANLU_RESUME=latest) or move it away."
                )
            self.fs.rm(self._dir(step), recursive=True)

    def prune(self, keep_last: int) -> list[int]:
        """Delete old checkpoints, keeping the last ``keep_last`` and every home they use.

        Call only after a commit: uncommitted directories older than the newest committed
        step are leftovers of failed saves and are removed too. Returns the removed steps.
        """
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        committed = self.committed_steps()
        if not committed:
            return []
        kept = committed[-keep_last:]
        needed = set(kept)
        for step in kept:
            needed |= self.read_manifest(step).homes
        removed = [s for s in self.step_dirs() if s < committed[-1] and s not in needed]
        for step in removed:
            self.fs.rm(self._dir(step), recursive=True)
        return removed


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
