"""Checkpoints on Azure Blob (``az://`` through adlfs) against Azurite: the same commit rule as on disk.

A checkpoint exists once its ``manifest.json`` does; a torn upload (data files, no
manifest) is never loaded, and a committed one damaged later is skipped for the previous.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from runtime.training.store import CheckpointStore, Manifest
from tests.clouds.azurite import Azurite, azurite_session, clear_adlfs_cache


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    yield from azurite_session(tmp_path_factory)


@pytest.fixture
def root(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    clear_adlfs_cache()  # fsspec keys its instances by arguments, not by this variable: drop other Azurites'
    container = f"ckpt-{uuid.uuid4().hex[:12]}"
    import fsspec

    fsspec.filesystem("az", connection_string=azurite.connection_string).mkdir(container)
    return f"az://{container}/runs/r1"


def _save(store: CheckpointStore, step: int, payload: bytes, *, commit: bool = True) -> None:
    """What rank 0 does: data files first, the manifest (with their digests) last."""
    store.prepare(step)
    base = store.url(step)
    store.fs.pipe_file(f"{base}/__0_0.distcp", payload)
    store.fs.pipe_file(f"{base}/.metadata", b"dcp-metadata-" + str(step).encode())
    if not commit:
        return  # the upload was torn here: no manifest
    store.commit(Manifest(
        step=step, world_size=2, global_batch=8, samples_seen=8 * step, seed=0, reason="interval",
        files=store.digest_files(step), tensors={}, bytes_written=len(payload),
    ))


def test_a_torn_upload_is_never_loaded(root: str) -> None:
    store = CheckpointStore(root)
    assert not store.is_local
    assert store.latest_step() is None
    _save(store, 10, b"weights-at-10" * 100)
    _save(store, 20, b"weights-at-20" * 100, commit=False)

    assert store.step_dirs() == [10, 20]
    assert store.committed_steps() == [10] and store.latest_step() == 10
    selection = store.select("latest")
    assert selection.step == 10
    assert selection.discard == ((20, "partial"),)
    assert any("never committed" in p for p in selection.problems)
    store.discard(20, "partial")
    assert store.step_dirs() == [10]
    assert store.verify(10) == []

    # A fresh store (another process, another region) sees the same thing from the blobs alone.
    again = CheckpointStore(root)
    assert again.latest_step() == 10 and again.read_manifest(10).samples_seen == 80


def test_a_damaged_committed_checkpoint_is_skipped_for_the_previous(root: str) -> None:
    store = CheckpointStore(root)
    _save(store, 10, b"a" * 4096)
    _save(store, 20, b"b" * 4096)
    store.fs.pipe_file(f"{store.url(20)}/__0_0.distcp", b"b" * 4000)  # truncated after the commit
    assert store.verify(20) and "has 4000 bytes, 4096 were written" in store.verify(20)[0]
    selection = store.select("latest")
    assert selection.step == 10 and selection.discard == ((20, "corrupt"),)


def test_prepare_refuses_to_overwrite_a_commit_and_prune_keeps_the_last(root: str) -> None:
    store = CheckpointStore(root)
    for step in (10, 20, 30):
        _save(store, step, f"w{step}".encode() * 64)
    with pytest.raises(Exception, match="already committed"):
        store.prepare(30)
    assert store.prune(keep_last=2) == [10]
    assert store.committed_steps() == [20, 30]
