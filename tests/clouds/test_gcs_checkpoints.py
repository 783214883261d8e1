"""The checkpoint commit rule on gs:// (a local GCS emulator through gcsfs): a torn upload is never loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from runtime.training.store import CheckpointStore, Manifest, TensorRecord
from tests.clouds.dataplane import repo_pythonpath
from tests.clouds.gcs import BUCKET, gcs, gcs_emulator  # noqa: F401 (fixtures)


@pytest.fixture
def store(gcs) -> CheckpointStore:  # noqa: F811
    return CheckpointStore(f"gs://{BUCKET}/ckpt-{uuid.uuid4().hex[:8]}")


def _save(store: CheckpointStore, step: int, *, commit: bool = True) -> None:
    """A step as DCP leaves it (one data file per rank, .metadata), then our manifest."""
    base = store.url(step)
    store.fs.pipe_file(f"{base}/__0_0.distcp", os.urandom(4096) + f"step {step}".encode())
    store.fs.pipe_file(f"{base}/__1_0.distcp", os.urandom(4096))
    store.fs.pipe_file(f"{base}/.metadata", b"dcp metadata")
    if commit:
        files = store.digest_files(step)
        store.commit(Manifest(step=step, world_size=2, global_batch=8, samples_seen=8 * step, seed=0,
                              reason="interval", files=files, tensors={"w": TensorRecord(home=step)},
                              bytes_written=sum(f.size for f in files.values())))


def test_a_save_without_its_manifest_is_never_loaded_and_is_removed_on_resume(store: CheckpointStore) -> None:
    _save(store, 10)
    _save(store, 20, commit=False)  # the node was reclaimed after the data files, before the manifest
    assert store.step_dirs() == [10, 20]
    assert store.latest_step() == 10
    selection = store.select("latest")
    assert selection.step == 10
    assert selection.discard == ((20, "partial"),)
    assert any("step-20 was never committed" in p for p in selection.problems)
    store.discard(20, "partial")
    store.fs.invalidate_cache()
    assert store.step_dirs() == [10]
    assert store.verify(10) == []


def test_an_interrupted_resumable_upload_leaves_no_object(store: CheckpointStore, gcs) -> None:  # noqa: F811
    _save(store, 10)
    target = f"{store.url(30)}/__0_0.distcp"
    # A node writing a big data file as a resumable upload dies (no close, no finaliser) mid-way.
    script = (
        "import os, sys, fsspec\n"
        "fs, path = fsspec.core.url_to_fs(sys.argv[1])\n"
        "f = fs.open(path, 'wb', block_size=256 * 1024)\n"
        "f.write(os.urandom(600 * 1024)); f.flush()\n"
        "print(f.location is not None, flush=True)\n"
        "os._exit(9)\n"
    )
    env = {**os.environ, **gcs.env, "PYTHONPATH": repo_pythonpath()}
    done = subprocess.run([sys.executable, "-c", script, target], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 9, done.stderr[-2000:]
    assert done.stdout.strip() == "True"  # the upload session had started: chunks went up
    store.fs.invalidate_cache()
    assert not store.fs.exists(target)
    assert store.latest_step() == 10 and store.select("latest").step == 10


def test_a_committed_checkpoint_damaged_later_is_skipped(store: CheckpointStore) -> None:
    _save(store, 10)
    _save(store, 20)
    store.fs.pipe_file(f"{store.url(20)}/__1_0.distcp", b"short")  # overwritten by something else
    selection = store.select("latest")
    assert selection.step == 10
    assert selection.discard == ((20, "corrupt"),)
    assert any("__1_0.distcp has 5 bytes" in p for p in selection.problems)


def test_a_rename_is_one_move_call(store: CheckpointStore) -> None:
    """DCP renames .metadata into place; the emulator answers objects.move as GCS does (no 501 retries)."""
    store.fs.pipe_file(f"{store.url(1)}/.metadata.tmp", b"dcp metadata")
    started = time.monotonic()
    store.fs.mv(f"{store.url(1)}/.metadata.tmp", f"{store.url(1)}/.metadata")
    assert time.monotonic() - started < 5.0  # a 501 would cost ~15 s of gcsfs retries first
    store.fs.invalidate_cache()
    assert store.fs.cat_file(f"{store.url(1)}/.metadata") == b"dcp metadata"
    assert not store.fs.exists(f"{store.url(1)}/.metadata.tmp")
