"""Atomic writes of small files that a reader must never see half-written.

The classic recipe: write a temporary file in the same directory, flush and fsync it,
``os.replace`` it over the target (atomic on POSIX within one filesystem), then fsync the
directory so that the rename itself survives a power cut.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
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


def write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    write_bytes(path, text.encode("utf-8"), mode=mode)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
