"""A runs directory's home id: how `planner gc` tells an instance whose run directory is gone from one
started from another runs directory.

A team shares a cloud account, each member with their own runs directory. Without a home, gc in one of
them found a teammate's running instances under no run it knew and deleted them as "run directory gone".
A run on a cloud provider therefore tags its instances with the id of the runs directory it was started in
(``danlu-home``), kept in that directory's ``.danlu-home``: gc judges as gone only the instances of its own
home. The id is random, not a hash of the path, because ``/home/ubuntu/runs`` is the same path on every
machine a team starts from; it moves with the directory when the directory is moved or shared.

So that gc can say where another home is, each home used on this machine is remembered with its
directory's path in the user's data directory (``homes.json``): a hint, rebuilt as runs start, updated under
a lock so that runs starting at once from several runs directories all stay in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from danlu import atomic_file
from pricing.embedded_catalog import data_dir
from runtime.control.queue_record import is_queue_run
from runtime.control.run_state import RunStateError

HOME_FILE = ".danlu-home"
KNOWN_FILE = "homes.json"
_HOME = re.compile(r"[0-9a-f]{12}")
log = logging.getLogger(__name__)


class KnownHomes(BaseModel):
    """``homes.json``: the runs directories (absolute paths, the latest last) each home was seen at."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = 1
    homes: dict[str, list[str]] = {}


def runs_root(run_dir: Path) -> Path:
    """The runs directory a run belongs to: its run directory's parent, or for a queue's job the queue's."""
    parent = run_dir.resolve().parent
    return parent.parent if is_queue_run(parent) else parent


def read_home(root: Path) -> str | None:
    """The home id of the runs directory ``root``; None when no cloud run was started there yet.

    Raises:
        RunStateError: the file is there but unreadable or not a home id.
    """
    path = root / HOME_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunStateError(f"{path}: cannot be read ({type(exc).__name__}: {exc}). To fix: make it readable.") \
            from None
    if not _HOME.fullmatch(text):
        raise RunStateError(
            f"{path}: not a danlu home id (12 hex digits, written when the first cloud run started here). To fix: "
            "restore it from a copy of this runs directory; if it is lost, delete the file -- `planner gc` then "
            "keeps the instances of the runs started here before, and `planner gc --any-home` judges them."
        )
    return text


def home_of(root: Path) -> str:
    """The home id of ``root``, made on first use. Two runs starting at once agree: the file is linked into
    place, so the second one reads the first one's."""
    found = read_home(root)
    if found is not None:
        _remember(found, root)
        return found
    root.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(6)
    draft = root / f"{HOME_FILE}.{token}"
    try:
        draft.write_text(token + "\n", encoding="ascii")
        draft.chmod(0o644)  # not a secret: a teammate's gc on a shared runs directory reads it
        _place(draft, root / HOME_FILE)
    except OSError as exc:
        raise RunStateError(
            f"{root / HOME_FILE}: cannot be written ({type(exc).__name__}: {exc}). To fix: make the runs "
            "directory writable."
        ) from None
    finally:
        draft.unlink(missing_ok=True)
    home = read_home(root) or token
    _remember(home, root)
    return home


def known_homes() -> KnownHomes:
    """The homes seen on this machine; none when the file is missing or unreadable (it is only a hint)."""
    path = data_dir() / KNOWN_FILE
    try:
        return KnownHomes.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return KnownHomes()
    except (OSError, ValidationError) as exc:
        log.warning("%s: unreadable, ignored (%s)", path, type(exc).__name__)
        return KnownHomes()


def _remember(home: str, root: Path) -> None:
    where = str(root.resolve())
    if known_homes().homes.get(home, [])[-1:] == [where]:
        return
    try:
        with _locked(data_dir() / f"{KNOWN_FILE}.lock"):
            known = known_homes()  # again, under the lock: another start may have added its home since
            seen = known.homes.get(home, [])
            known.homes[home] = [p for p in seen if p != where][-4:] + [where]
            atomic_file.write_text(data_dir() / KNOWN_FILE, known.model_dump_json(indent=2) + "\n")
    except OSError as exc:  # a hint for gc's messages, not worth a run
        log.warning("could not remember runs directory %s: %s", where, exc)


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (made if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock


def _place(draft: Path, path: Path) -> None:
    """``draft`` at ``path`` unless a file is there already (which then wins)."""
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: exclusive create, a moment's empty file
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(draft.read_text(encoding="ascii"))
