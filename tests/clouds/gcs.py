"""A local GCS for tests: the ``gcp-storage-emulator`` pip package, on 127.0.0.1, in its own process.

gcsfs (and google-cloud-storage) talk to it through ``STORAGE_EMULATOR_HOST``. Two more
settings keep every request on 127.0.0.1 and quick:

* ``FSSPEC_GCS_TOKEN=anon`` (fsspec reads ``FSSPEC_<PROTOCOL>_<KWARG>`` into its config):
  no credential lookup, which would otherwise probe the GCE metadata server;
* ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: gcsfs >= 2025 asks the Storage Control
  gRPC API for each bucket's type first, which the emulator does not speak (a 60 s timeout).

The emulator lacks one call gcsfs makes: ``objects.move`` (``POST /storage/v1/b/{bucket}/o/
{object}/moveTo/o/{destination}``, which real GCS answers with the moved object's
resource). gcsfs falls back to copy + delete only after five retries of the emulator's 501
(~15 s per rename, and DCP renames every checkpoint's ``.metadata`` into place), so
:func:`serve` adds the route before it starts the emulator.

:attr:`GcsEmulator.env` is that environment for child processes (the data plane's nodes);
the ``gcs`` fixture applies it to this process too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clouds.dataplane import repo_pythonpath

BUCKET = "danlu-test"
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _move(request, response, storage, *args, **kwargs) -> None:
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    bucket, source, dest = (request.params[k] for k in ("bucket_name", "object_id", "dest_object_id"))
    try:
        moved = objects._copy(request.base_url, storage, bucket, source, bucket, dest)
        storage.delete_file(bucket, source)
    except NotFound:
        response.status = 404
        return
    response.json(moved)


def serve(host: str, port: int, bucket: str) -> None:
    """``gcp-storage-emulator start --in-memory --default-bucket`` plus the ``moveTo`` route."""
    from gcp_storage_emulator import server, settings
    from gcp_storage_emulator.server import POST, create_server

    route = ((rf"^{settings.API_ENDPOINT}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/"
             r"(?P<dest_object_id>.*[^/]+)$"), {POST: _move})
    server.HANDLERS = (route, *server.HANDLERS)
    create_server(host, port, in_memory=True, default_bucket=bucket).run()


class GcsEmulator:
    """``gcp-storage-emulator start --in-memory`` with one bucket; :meth:`start` waits until it answers."""

    def __init__(self, log_dir: Path, *, bucket: str = BUCKET):
        self.bucket = bucket
        self.port = _free_port()
        self.log_path = log_dir / "gcs-emulator.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "FSSPEC_GCS_TOKEN": "anon",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GOOGLE_CLOUD_PROJECT": "danlu-test",
        }

    def start(self, timeout_s: float = 60.0) -> GcsEmulator:
        with open(self.log_path, "wb") as log:
            code = f"from tests.clouds.gcs import serve; serve('127.0.0.1', {self.port}, {self.bucket!r})"
            self._process = subprocess.Popen(
                [sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=REPO, env={**os.environ, "PYTHONPATH": repo_pythonpath()},
            )
        deadline = time.monotonic() + timeout_s
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            try:
                with opener.open(f"{self.url}/storage/v1/b/{self.bucket}", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"GCS emulator did not start; see {self.log_path}:\n"
                                   + self.log_path.read_text(errors="replace")[-2000:])
            time.sleep(0.2)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)


def use_emulator(emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point this process's gcsfs at ``emulator`` (env, fsspec config, no cached filesystems)."""
    for key, value in emulator.env.items():
        monkeypatch.setenv(key, value)
    import fsspec.config
    import gcsfs.core

    registry = sys.modules["fsspec.registry"]._registry  # (fsspec.registry is the read-only view)

    # gcsfs picks its class when imported; one imported earlier may have the gRPC probe on.
    for protocol in ("gs", "gcs"):
        monkeypatch.setitem(registry, protocol, gcsfs.core.GCSFileSystem)
    # fsspec read FSSPEC_GCS_TOKEN when it was imported, before this test set it.
    for protocol in ("gs", "gcs"):
        monkeypatch.setitem(fsspec.config.conf, protocol, {**fsspec.config.conf.get(protocol, {}), "token": "anon"})
    gcsfs.core.GCSFileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    emulator = GcsEmulator(tmp_path_factory.mktemp("gcs")).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def gcs(gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsEmulator]:
    use_emulator(gcs_emulator, monkeypatch)
    yield gcs_emulator
    import gcsfs.core

    gcsfs.core.GCSFileSystem.clear_instance_cache()
