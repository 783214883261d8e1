"""Atomic writes of small files that a reader must never see half-written.

The classic recipe: write a temporary file in the same directory, flush and fsync it,
``os.replace`` it over the target (atomic on POSIX within one filesystem), then fsync the
directory so that the rename itself survives a power cut.

It lives in ``pricing``, the bottom layer, so that all three packages (price catalogs,
plots, run state, checkpoints' manifests, the alert outbox) share one implementation.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``data`` atomically, creating parent directories as needed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)
    return target


def write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    return write_bytes(path, text.encode("utf-8"), mode=mode)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # directories cannot be opened on some platforms (Windows); the rename is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
