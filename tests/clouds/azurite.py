"""Azurite (Microsoft's Azure Storage emulator, npm ``azurite``) as a Blob endpoint on 127.0.0.1.

:func:`azurite_session` is the body of the tests' ``azurite`` fixture: it finds
``azurite-blob`` (``$DANLU_AZURITE_BIN``, then ``PATH``, then the cache), installs it the
first time with ``npm install --prefix <cache> azurite@3`` (cache: ``$DANLU_AZURITE_CACHE``,
default ``~/.cache/danlu-tests/azurite``), and skips the tests, saying why, when node or npm
is missing or the install fails. It runs blob only, telemetry off (Azurite would otherwise
post to Application Insights), on a port the kernel picks, in a temporary workspace.

adlfs reads ``AZURE_STORAGE_CONNECTION_STRING`` (:attr:`Azurite.connection_string`), so
``az://<container>/<prefix>`` URLs go to the emulator through fsspec like any Azure account.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "Azurite", "azurite_session", "clear_adlfs_cache", "find_azurite"]

# Azurite's well-known development account (https://learn.microsoft.com/azure/storage/common/storage-use-azurite
# "Well-known storage account and key"): not a secret, the same in every Azurite.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
VERSION_SPEC = "azurite@3"
START_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Azurite:
    """A running emulator: its blob endpoint and the connection string for it."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"BlobEndpoint={self.blob_endpoint};")

    def environment(self) -> dict[str, str]:
        """What a process needs for adlfs (``az://``) to reach this emulator."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}


def _cache() -> Path:
    return Path(os.environ.get("DANLU_AZURITE_CACHE") or Path.home() / ".cache" / "danlu-tests" / "azurite")


def find_azurite(*, install: bool = True) -> tuple[Path | None, str]:
    """(path of azurite-blob, "") or (None, why not)."""
    explicit = os.environ.get("DANLU_AZURITE_BIN")
    if explicit:
        return (Path(explicit), "") if Path(explicit).is_file() else (None, f"$DANLU_AZURITE_BIN={explicit} is not a file")
    on_path = shutil.which("azurite-blob")
    if on_path:
        return Path(on_path), ""
    if not shutil.which("node"):
        return None, "node is not installed (Azurite is a Node.js program)"
    cache = _cache()
    binary = cache / "node_modules" / ".bin" / "azurite-blob"
    if binary.is_file():
        return binary, ""
    npm = shutil.which("npm")
    if not install or not npm:
        return None, f"azurite-blob is not installed and npm is missing (to fix: npm install --prefix {cache} {VERSION_SPEC})"
    cache.mkdir(parents=True, exist_ok=True)
    # One install at a time (pytest-xdist workers, parallel suites): the others wait, then find it.
    with open(cache / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            try:
                done = subprocess.run(
                    [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", "--no-save", VERSION_SPEC],
                    capture_output=True, timeout=INSTALL_TIMEOUT_S, check=False,
                )
            except subprocess.TimeoutExpired:
                return None, f"npm install {VERSION_SPEC} took more than {INSTALL_TIMEOUT_S:.0f} s"
            if done.returncode != 0:
                tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
                return None, f"npm install {VERSION_SPEC} failed: {' / '.join(tail)}"
    return (binary, "") if binary.is_file() else (None, f"npm install {VERSION_SPEC} did not produce {binary}")


@contextmanager
def running_azurite(workspace: Path, binary: Path) -> Iterator[Azurite]:
    """Start azurite-blob on 127.0.0.1 and a free port; stop it (its whole process group) on exit."""
    workspace.mkdir(parents=True, exist_ok=True)
    log_path = workspace / "azurite.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", "0", "--location", str(workspace),
             "--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent", "--disableProductStyleUrl"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        port = None
        while port is None:
            match = re.search(r"listens on http://127\.0\.0\.1:(\d+)", log_path.read_text(errors="replace"))
            if match:
                port = int(match.group(1))
                break
            if process.poll() is not None:
                raise RuntimeError(f"azurite-blob exited {process.returncode}: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"azurite-blob did not listen within {START_TIMEOUT_S:.0f} s: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Azurite(port=port, process=process)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def clear_adlfs_cache() -> None:
    """Forget cached ``az://`` filesystems: one made for an Azurite that is gone would still be used."""
    try:
        from adlfs import AzureBlobFileSystem
    except ImportError:
        return
    AzureBlobFileSystem.clear_instance_cache()


def azurite_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Body of a session fixture: a running Azurite, or the tests skipped with the reason."""
    pytest.importorskip("adlfs", reason="adlfs is not installed (pip install 'danlu[azure]')")
    binary, why = find_azurite()
    if binary is None:
        if os.environ.get("CI"):  # CI promises the Azure tests ran: a missing Azurite is a failure there
            pytest.fail(f"Azurite unavailable in CI: {why}")
        pytest.skip(f"Azurite unavailable: {why}")
    with running_azurite(tmp_path_factory.mktemp("azurite"), binary) as azurite:
        yield azurite
    clear_adlfs_cache()
