"""Code shipping: the user's working directory as one content-addressed tar.gz in the run's stage.

``make_bundle(root)`` collects the files a cloud node needs to run the job's entrypoint:

* in a git work tree, what ``git ls-files -co --exclude-standard -z`` lists (tracked files
  plus untracked ones that ``.gitignore`` does not exclude) -- the argv is fixed, no shell;
* elsewhere, every file under ``root`` except :data:`DEFAULT_EXCLUDES` (VCS folders,
  virtual environments, caches, ``runs/``).

The archive is deterministic (sorted names, zeroed times and owners), so the same tree
always has the same SHA-256 and is uploaded once (``bundle-<sha256>.tar.gz``). Above the
size cap the bundle is refused with the biggest files named, so the user can ignore them.
Symbolic links are stored as links only when they stay inside the tree; others are
skipped (a node must never read outside its bundle). :func:`unpack` extracts with
``tarfile``'s ``data`` filter (no absolute paths, no ``..``, no device files).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import posixpath
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from runtime.providers.base import ProviderError

__all__ = [
    "DEFAULT_EXCLUDES",
    "DEFAULT_MAX_BYTES",
    "Bundle",
    "BundleError",
    "list_files",
    "make_bundle",
    "unpack",
    "upload",
]

DEFAULT_MAX_BYTES = 200 * 1024 * 1024
DEFAULT_EXCLUDES = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "env", "__pycache__", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".tox", "node_modules", "runs", ".ipynb_checkpoints",
})
"""Folder names skipped when the directory is not a git work tree."""


class BundleError(ProviderError):
    """The working directory cannot be shipped (too big, unreadable)."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """One archive: ``name`` is ``bundle-<sha256>.tar.gz``; ``files`` how many files it holds."""

    name: str
    data: bytes
    files: int

    @property
    def sha256(self) -> str:
        return self.name[len("bundle-"):-len(".tar.gz")]


def _git_files(root: Path) -> list[str] | None:
    """The files git would ship, or None when ``root`` is not in a git work tree (or git is missing)."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, timeout=120, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = [n for n in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    return sorted({n for n in names if (root / n).is_file() or (root / n).is_symlink()})


def _walk_files(root: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDES and not d.endswith(".egg-info"))
        rel = Path(folder).relative_to(root)
        found.extend(str(rel / f) if str(rel) != "." else f for f in files if not f.endswith((".pyc", ".pyo")))
    return sorted(found)


def list_files(root: str | os.PathLike[str]) -> list[str]:
    """The relative paths :func:`make_bundle` packs (see the module docstring)."""
    root = Path(root)
    files = _git_files(root)
    return files if files is not None else _walk_files(root)


def _inside(root: Path, link: Path) -> bool:
    target = (link.parent / os.readlink(link)).resolve()
    return target == root or root in target.parents


def make_bundle(root: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Bundle:
    """Pack ``root`` (see the module docstring).

    Raises:
        BundleError: the files add up to more than ``max_bytes`` (the biggest are named),
            or one cannot be read.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise BundleError(f"the working directory {root} to ship to the nodes is not a directory")
    names = list_files(root)
    sizes = {}
    for name in names:
        path = root / name
        if path.is_symlink():
            sizes[name] = 0
            continue
        try:
            sizes[name] = path.stat().st_size
        except OSError as exc:
            raise BundleError(f"cannot read {path} to ship it to the nodes: {exc}") from exc
    total = sum(sizes.values())
    if total > max_bytes:
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
        listing = ", ".join(f"{n} ({s / 2**20:.1f} MiB)" for n, s in biggest)
        raise BundleError(
            f"the working directory {root} is {total / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB cap for "
            f"the code bundle; biggest files: {listing}. To fix: add data and outputs to .gitignore (they belong "
            "in object storage), run from a smaller directory, or raise [run.options] bundle_max_mb."
        )
    raw = io.BytesIO()
    # mtime=0 and fixed owners: the same tree always gives the same bytes, hence the same name.
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = root / name
            info = tarfile.TarInfo(posixpath.normpath(name.replace(os.sep, "/")))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_symlink():
                if not _inside(root, path):
                    continue  # a link out of the tree would read the node's own files
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                tar.addfile(info)
                continue
            mode = path.stat().st_mode
            info.mode = 0o755 if mode & 0o111 else 0o644
            data = path.read_bytes()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    return Bundle(name=f"bundle-{hashlib.sha256(data).hexdigest()}.tar.gz", data=data, files=len(names))


def upload(bundle: Bundle, stage_url: str) -> str:
    """Put ``bundle`` into the stage unless it is there already; returns its URL."""
    import fsspec.core

    url = f"{stage_url.rstrip('/')}/{bundle.name}"
    fs, path = fsspec.core.url_to_fs(url)
    try:
        if fs.info(path).get("size") == len(bundle.data):
            return url  # content-addressed: same name, same bytes
    except FileNotFoundError:
        pass
    if "file" in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)  # object stores have no folders to make
    fs.pipe_file(path, bundle.data)
    return url


def unpack(data: bytes, dest: str | os.PathLike[str], *, expected_sha256: str | None = None) -> Path:
    """Extract a bundle into ``dest`` (created 0700) with the ``data`` filter.

    Raises:
        BundleError: the bytes do not match ``expected_sha256`` or are not a bundle.
    """
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise BundleError(f"the code bundle does not match its name (sha256 {expected_sha256}): a torn upload?")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"cannot unpack the code bundle into {dest}: {exc}") from exc
    return dest
