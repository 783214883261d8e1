"""A runs directory's home id (runtime.control.run_home): made once, agreed on by concurrent starts,
refused when damaged."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from runtime.control.queue_record import QUEUE_RUN_FILE
from pricing.embedded_catalog import data_dir
from runtime.control.run_home import HOME_FILE, KNOWN_FILE, home_of, known_homes, read_home, runs_root
from runtime.control.run_state import RunStateError


def test_runs_starting_at_once_agree_on_one_home(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    homes: list[str] = []
    go = threading.Barrier(8)

    def start() -> None:
        go.wait()
        homes.append(home_of(root))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(homes) == 8 and len(set(homes)) == 1
    assert read_home(root) == homes[0] and sorted(p.name for p in root.iterdir()) == [HOME_FILE]


def test_runs_starting_at_once_from_several_runs_directories_are_all_remembered(tmp_path: Path) -> None:
    roots = [tmp_path / f"runs-{i}" for i in range(8)]
    homes: dict[Path, str] = {}
    go = threading.Barrier(len(roots))

    def start(root: Path) -> None:
        go.wait()
        homes[root] = home_of(root)

    threads = [threading.Thread(target=start, args=(root,)) for root in roots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert known_homes().homes == {home: [str(root.resolve())] for root, home in homes.items()}


def test_without_hard_links_the_home_is_still_made_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")  # what a file system without hard links answers

    monkeypatch.setattr(os, "link", no_links)
    first = home_of(tmp_path)
    assert home_of(tmp_path) == first and read_home(tmp_path) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == [HOME_FILE]


def test_a_queues_jobs_belong_to_the_runs_directory_holding_the_queue(tmp_path: Path) -> None:
    queue = tmp_path / "runs" / "nightly"
    queue.mkdir(parents=True)
    (queue / QUEUE_RUN_FILE).write_text("{}")
    assert runs_root(queue / "train") == (tmp_path / "runs").resolve()
    assert runs_root(tmp_path / "runs" / "bert") == (tmp_path / "runs").resolve()


@pytest.mark.parametrize("text", ["", "0123", "ZZZZZZZZZZZZ", "0123456789abcdef"])
def test_a_damaged_home_is_refused_with_the_fix(tmp_path: Path, text: str) -> None:
    (tmp_path / HOME_FILE).write_text(text)
    with pytest.raises(RunStateError, match="not a danlu home id.*To fix: restore it"):
        home_of(tmp_path)
    assert (tmp_path / HOME_FILE).read_text() == text  # nothing overwritten


def test_each_home_is_remembered_where_it_was_last_seen(tmp_path: Path) -> None:
    home = home_of(tmp_path / "runs")
    moved = tmp_path / "moved"
    (tmp_path / "runs").rename(moved)  # the home moves with its directory
    assert home_of(moved) == home
    assert known_homes().homes == {home: [str((tmp_path / "runs").resolve()), str(moved.resolve())]}


def test_a_damaged_list_of_homes_is_ignored_and_rewritten(tmp_path: Path) -> None:
    (data_dir() / KNOWN_FILE).write_text("{not json")
    assert known_homes().homes == {}
    home = home_of(tmp_path)  # the run starts all the same
    assert known_homes().homes == {home: [str(tmp_path.resolve())]}
