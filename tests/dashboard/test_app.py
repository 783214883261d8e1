"""The dashboard server over HTTP (uvicorn on a real socket; synthetic runs from the runtime's own writers):
the token off loopback, the Host check on it, read-only access, and its answers to bad input."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from planner.cli import main
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.dashboard.app import DashboardConfig
from runtime.dashboard.server import start_in_thread
from tests.report.builders import HOUR, T0, finished_run, running_run
from tests.run.helpers import REPO


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    finished_run(root, name="done")
    return root


@pytest.fixture
def served(runs):
    server = start_in_thread(DashboardConfig(runs_dir=runs, poll_s=0.2))
    yield server
    server.stop()


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _first_event(url: str, **kwargs) -> dict:
    with httpx.stream("GET", url, timeout=30, **kwargs) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("the stream ended without an event")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_planner_dashboard_off_loopback_refuses_requests_without_the_token(runs) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("DANLU_DASHBOARD_TOKEN", None)
    server = subprocess.Popen([sys.executable, "-m", "planner.cli", "dashboard", "--runs-dir", str(runs), "--host",
                               "0.0.0.0", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, text=True)
    try:
        line = server.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)\?token=([\w-]+)", line)
        assert match, line + server.stdout.read() if server.poll() is not None else line
        base, token = match.group(1), match.group(2)
        assert "every request needs the token" in line
        for path in ("", "api/runs", "api/runs/done", "api/stream", "static/dashboard.js", "quote"):
            refused = httpx.get(base + path, timeout=30)
            assert refused.status_code == 401, path
            assert "token" not in refused.headers.get("set-cookie", "")
        assert httpx.get(base + "api/runs", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        assert httpx.get(base + "api/runs?token=wrong", timeout=30).status_code == 401
        rows = httpx.get(base + "api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert rows.status_code == 200 and [r["name"] for r in rows.json()["runs"]] == ["done"]
        # Opening the printed address: the token becomes a cookie and leaves the address bar.
        opened = httpx.get(base + f"?token={token}", timeout=30)
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        with httpx.Client(base_url=base, timeout=30) as browser:
            browser.cookies.set("danlu_dashboard", token)
            assert browser.get("/").status_code == 200
            assert _first_event(base + "api/stream", cookies={"danlu_dashboard": token})["runs"][0]["name"] == "done"
    finally:
        server.terminate()
        server.wait(30)


def test_on_loopback_only_loopback_host_names_are_served(served) -> None:
    assert httpx.get(served.url + "/api/runs", timeout=30).status_code == 200
    rebound = httpx.get(served.url + "/api/runs", headers={"Host": "attacker.example:80"}, timeout=30)
    assert rebound.status_code == 421
    page = httpx.get(served.url + "/", timeout=30)
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script" not in page.text.replace('<script src="/static/dashboard.js" defer></script>', "")


def test_reading_a_run_changes_nothing_in_it(runs, served) -> None:
    before = _files(runs)
    assert httpx.get(served.url + "/api/runs", timeout=30).json()["runs"][0]["status"] == "completed"
    detail = httpx.get(served.url + "/api/runs/done", timeout=30).json()
    assert detail["preemptions"] == 1 and [s["launch_id"] for s in detail["segments"]] == ["l-1", "l-2"]
    assert _first_event(served.url + "/api/runs/done/stream")["name"] == "done"
    assert httpx.get(served.url + "/api/jobs", timeout=30).json()["jobs"]
    assert _files(runs) == before, "no file of the runs directory was created or touched"


def test_a_running_controllers_ledger_is_never_blocked(tmp_path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    run_dir = running_run(root, name="live")
    server = start_in_thread(DashboardConfig(runs_dir=root, poll_s=0.1))
    seen: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(httpx.get(server.url + "/api/runs/live", timeout=30).json()["spent_usd"])

    reader = threading.Thread(target=read)
    try:
        with Ledger(run_dir) as ledger:  # the controller's own connection, writing as a heartbeat does
            reader.start()
            for i in range(1, 41):
                ledger.extend(IntervalKey("l-2", "l-2-n0"), until=T0 + 3 * HOUR + i * 60)  # raises if locked out
            total = ledger.total_usd()
            while len(seen) < 3:
                stop.wait(0.05)
    finally:
        stop.set()
        if reader.is_alive():
            reader.join(60)
        server.stop()
    assert seen == sorted(seen), "spend read while the ledger is written never goes backwards"
    assert seen[-1] <= total + 1e-9


def test_names_outside_the_runs_directory_are_not_found(tmp_path, served) -> None:
    (tmp_path / "secret.toml").write_text('name = "x"\n')
    for name in ("..", "%2e%2e", "..%2Fruns", "nope"):
        assert httpx.get(f"{served.url}/api/runs/{name}", timeout=30).status_code == 404, name
    asked = httpx.post(served.url + "/api/quote", json={"job": "file:../secret.toml"}, timeout=30)
    assert asked.status_code == 400 and "is not a job under" in asked.json()["error"]
    assert httpx.get(served.url + "/static/../app.py", timeout=30).status_code == 404


def test_a_queues_jobs_are_named_under_it_and_nothing_else_below_the_root_is_served(tmp_path, runs, served) -> None:
    queue = runs / "q-1"
    queue.mkdir()
    (queue / "queue_run.json").write_text("{}")
    finished_run(queue, name="a")
    not_a_queue = runs / "plain"  # a folder holding a run, but not a queue's: not served
    not_a_queue.mkdir()
    finished_run(not_a_queue, name="b")
    outside = tmp_path / "outside"  # a queue outside the root, linked into it
    outside.mkdir()
    (outside / "queue_run.json").write_text("{}")
    finished_run(outside, name="c")
    (runs / "link").symlink_to(outside)
    rows = httpx.get(served.url + "/api/runs", timeout=30).json()
    assert [r["name"] for r in rows["runs"]] == ["done", "q-1/a"] and rows["broken"] == []
    for name in ("q-1/a", "q-1%2Fa"):
        answer = httpx.get(f"{served.url}/api/runs/{name}", timeout=30)
        assert answer.status_code == 200 and answer.json()["name"] == "q-1/a", name
    assert _first_event(served.url + "/api/runs/q-1%2Fa/stream")["name"] == "q-1/a"
    assert httpx.get(served.url + "/runs/q-1%2Fa", timeout=30).status_code == 200  # the run page
    for name in ("q-1", "q-1/a/state.json", "plain/b", "link/c", "q-1/..%2Fdone", "q-1//a", "q-1/nope"):
        assert httpx.get(f"{served.url}/api/runs/{name}", timeout=30).status_code == 404, name
    assert httpx.get(served.url + "/api/runs/link/c/stream", timeout=30).status_code == 404
    jobs = [j["id"] for j in httpx.get(served.url + "/api/jobs", timeout=30).json()["jobs"]]
    assert "run:q-1/a" in jobs and "run:plain/b" not in jobs and "run:link/c" not in jobs


def test_quote_requests_are_checked(served) -> None:
    url = served.url + "/api/quote"
    form = httpx.post(url, content='{"toml": "x"}', headers={"content-type": "text/plain"}, timeout=30)
    assert form.status_code == 415  # a cross-site form post cannot start a solve
    broken = httpx.post(url, json={"toml": "name = "}, timeout=30)
    assert broken.status_code == 400 and broken.json()["error"].startswith("pasted job.toml")
    invalid = httpx.post(url, json={"toml": 'name = "x"\n[workload]\nsteps = 5\n[purchase]\nallow = ["cheap"]\n'},
                         timeout=30)
    assert invalid.status_code == 400 and "purchase.allow" in invalid.json()["error"]
    assert httpx.post(url, json={"objective": "speed", "job": "run:done"}, timeout=30).status_code == 400
    assert httpx.post(url, json=[1], timeout=30).status_code == 400


def test_the_command_checks_its_arguments(tmp_path, capsys) -> None:
    assert main(["dashboard", "--runs-dir", str(tmp_path / "missing")]) == 2
    assert "no such runs directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["dashboard", "--port", "70000"])


def test_a_broken_run_is_listed_with_its_reason_and_the_others_still_shown(runs, served) -> None:
    broken = runs / "torn"
    broken.mkdir()
    (broken / "state.json").write_text("{")
    rows = httpx.get(served.url + "/api/runs", timeout=30).json()
    assert [r["name"] for r in rows["runs"]] == ["done"]
    assert rows["broken"][0]["name"] == "torn" and "state.json" in rows["broken"][0]["error"]
    answer = httpx.get(served.url + "/api/runs/torn", timeout=30)
    assert answer.status_code == 500 and "state.json" in answer.json()["error"]
