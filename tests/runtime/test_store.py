"""The step-N/ layout: commit rule, verification, selection on resume, pruning (no torch)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from runtime.errors import CheckpointError
from runtime.training.store import CheckpointStore, Manifest, TensorRecord


def _fake_checkpoint(
    store: CheckpointStore, step: int, *, commit: bool = True, homes: dict[str, int] | None = None
) -> None:
    """A step directory laid out as DCP leaves it, with our manifest when committed."""
    base = store.url(step)
    store.fs.makedirs(base, exist_ok=True)
    store.fs.pipe_file(f"{base}/__0_0.distcp", f"tensor bytes of step {step}".encode() * 50)
    store.fs.pipe_file(f"{base}/.metadata", b"dcp metadata")
    if commit:
        tensors = {"model/w": TensorRecord(home=step, digest="d")}
        tensors.update({key: TensorRecord(home=home, digest="f") for key, home in (homes or {}).items()})
        files = store.digest_files(step)
        store.commit(
            Manifest(
                step=step, world_size=2, global_batch=16, samples_seen=16 * step, seed=0, reason="interval",
                files=files, tensors=tensors, bytes_written=sum(f.size for f in files.values()),
            )
        )


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStore:
    if request.param == "local":
        return CheckpointStore(str(tmp_path / "ckpt"))
    return CheckpointStore(f"memory://danlu-{uuid.uuid4().hex}/ckpt")


def test_latest_is_the_highest_committed_step(store: CheckpointStore) -> None:
    assert store.latest_step() is None and store.step_dirs() == []
    for step in (5, 10):
        _fake_checkpoint(store, step)
    _fake_checkpoint(store, 15, commit=False)
    assert store.step_dirs() == [5, 10, 15]
    assert store.committed_steps() == [5, 10]
    assert store.latest_step() == 10


def test_a_lost_dcp_metadata_file_fails_verification(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    store.fs.rm(f"{store.url(5)}/.metadata")
    assert store.is_committed(5)
    assert store.verify(5) == [f"{store.url(5)}/.metadata is missing"]


def test_manifest_round_trip(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    _fake_checkpoint(store, 6, homes={"model/frozen": 5})
    manifest = store.read_manifest(6)
    assert manifest.homes == {5}
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert manifest.bytes_written == sum(f.size for f in manifest.files.values()) > 0


def test_corrupted_latest_is_skipped_and_reported(store: CheckpointStore) -> None:
    for step in (5, 10):
        _fake_checkpoint(store, step)
    data = f"{store.url(10)}/__0_0.distcp"
    blob = bytearray(store.fs.cat_file(data))
    blob[7] ^= 0xFF
    store.fs.pipe_file(data, bytes(blob))
    selection = store.select("latest")
    assert selection.step == 5
    assert any("step-10/__0_0.distcp does not match its digest" in p for p in selection.problems)
    assert selection.discard == ((10, "corrupt"),)


def test_truncated_and_missing_files_are_problems(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    store.fs.pipe_file(f"{store.url(5)}/__0_0.distcp", b"short")
    assert "bytes" in store.verify(5)[0]
    store.fs.rm(f"{store.url(5)}/__0_0.distcp")
    assert "missing" in store.verify(5)[0]


def test_a_partial_save_is_never_chosen_and_is_removed(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    _fake_checkpoint(store, 10, commit=False)
    selection = store.select("latest")
    assert selection.step == 5 and selection.discard == ((10, "partial"),)
    assert "never committed" in selection.problems[0]
    store.discard(10, "partial")
    assert store.step_dirs() == [5]


def test_a_checkpoint_whose_base_is_gone_is_unusable(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    _fake_checkpoint(store, 10, homes={"model/frozen": 5})
    store.fs.rm(store.url(5), recursive=True)
    assert "not committed" in store.verify(10)[0]


def test_no_usable_checkpoint_is_an_error_not_a_silent_restart(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    store.fs.pipe_file(f"{store.url(5)}/.metadata", b"changed")
    with pytest.raises(CheckpointError, match="DANLU_RESUME=none"):
        store.select("latest")


def test_resume_from_an_explicit_step_discards_newer_ones(store: CheckpointStore) -> None:
    for step in (5, 10, 15):
        _fake_checkpoint(store, step)
    selection = store.select(10)
    assert selection.step == 10 and selection.discard == ((15, "superseded"),)
    with pytest.raises(CheckpointError, match=r"committed steps \[5, 10, 15\]"):
        store.select(7)


def test_resume_none_sets_everything_aside(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    selection = store.select("none")
    assert selection.step is None and selection.discard == ((5, "superseded"),)
    store.discard(5, "superseded")
    assert store.step_dirs() == []
    assert len(store.fs.ls(f"{store.root}/discarded")) == 1


def test_prune_keeps_the_last_k_and_their_homes(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 1)
    for step in (2, 3, 4, 5):
        _fake_checkpoint(store, step, homes={"model/frozen": 1})
    _fake_checkpoint(store, 3_000, commit=False)  # newer than any commit: a save in flight
    assert store.prune(keep_last=2) == [2, 3]
    assert store.step_dirs() == [1, 4, 5, 3_000]


def test_prune_removes_old_partial_saves(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 1, commit=False)
    _fake_checkpoint(store, 2)
    assert store.prune(keep_last=3) == [1]
    with pytest.raises(ValueError):
        store.prune(keep_last=0)


def test_prepare_refuses_to_overwrite_a_commit(store: CheckpointStore) -> None:
    _fake_checkpoint(store, 5)
    with pytest.raises(CheckpointError, match="refusing to overwrite"):
        store.prepare(5)
    _fake_checkpoint(store, 6, commit=False)
    store.prepare(6)
    assert 6 not in store.step_dirs()


def test_unreadable_manifest_is_reported(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    _fake_checkpoint(store, 5)
    (tmp_path / "step-5" / "manifest.json").write_text("{}")
    assert "unreadable" in store.verify(5)[0]
    assert store.is_local
