"""Fixtures of the dashboard and tracking tests: one real tracked run, one browser, one dashboard.

The run is shared by every test here (a `planner run` of the digits example costs ~30 s of
CPU): local provider, one spot preemption at the start (chaos), MLflow + W&B offline +
TensorBoard. It starts when the first test asks for it and goes on in the background, so
the runs-list test watches it progress; the others wait for its end.

The browser is Debian's Chromium (``apt-get install chromium``; Playwright's own browser is
never downloaded), driven by the ``playwright`` package. Without it the browser tests skip
saying so -- and fail under CI (``CI=true``), where .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.run.helpers import REPO, digits_entrypoint, write_catalog, write_job

CHROMIUM = Path(os.environ.get("DANLU_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DOCS = REPO / "docs"
STEPS = 60
# MLflow 3 reports usage to its makers and W&B reports errors to Sentry unless told not to:
# no test may send traffic off this machine, from the test process or a training process.
NO_PHONING_HOME = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "WANDB_ERROR_REPORTING": "false",
                   "WANDB_SILENT": "true"}


@pytest.fixture(autouse=True, scope="session")
def _trackers_stay_home():
    saved = {k: os.environ.get(k) for k in NO_PHONING_HOME}
    os.environ.update(NO_PHONING_HOME)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@dataclass
class TrackedRun:
    root: Path  # the runs directory (the dashboard's --runs-dir)
    run_dir: Path
    tracking: Path  # where the trackers write
    job: Path
    process: subprocess.Popen
    log: Path

    def wait(self, timeout_s: float = 600) -> Path:
        """The run directory, once the controller exited 0."""
        code = self.process.wait(timeout_s)
        assert code == 0, self.log.read_text()[-4000:]
        return self.run_dir


@pytest.fixture(scope="session")
def tracked_run(tmp_path_factory, _trackers_stay_home) -> TrackedRun:
    base = tmp_path_factory.mktemp("tracked")
    root, tracking = base / "runs", base / "tracking"
    root.mkdir()
    tracking.mkdir()
    catalog = write_catalog(base / "catalog.csv")
    extra = f"""
[tracking]
every_steps = 10

[tracking.mlflow]
tracking_uri = "sqlite:///{tracking / 'mlflow.db'}"
experiment = "digits-dashboard-test"

[tracking.wandb]
project = "digits-dashboard-test"
mode = "offline"
dir = "{tracking}"

[tracking.tensorboard]
log_dir = "{tracking / 'tb'}"
"""
    entry = [*digits_entrypoint(STEPS)[:-1], "10"]  # --log-every 10: s.log({"lr"}) at the logged steps
    job = write_job(base / "job.toml", entrypoint=entry, steps=STEPS, nproc=1, extra=extra)
    run_dir = root / "digits-tracked"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", **NO_PHONING_HOME}
    log = base / "controller.log"
    command = [sys.executable, "-m", "planner.cli", "run", str(job), "--catalog", str(catalog), "--run-dir",
               str(run_dir), "--time-scale", "30", "--cooldown", "120", "--chaos", "at=0s"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=base, stdout=out, stderr=subprocess.STDOUT, env=env)
    run = TrackedRun(root, run_dir, tracking, job, process, log)
    yield run
    if process.poll() is None:
        process.kill()
        process.wait(30)


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    if CHROMIUM.exists() and shutil.which(str(CHROMIUM)):
        return CHROMIUM
    message = f"needs Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + "; .ci/run installs it in CI")
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser(chromium_path):
    try:
        from playwright import sync_api
    except ImportError:
        message = "needs the playwright package (the [test] extra)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as p:
        # Not under libfaketime (tools/suite_clock_ahead.sh): with a faked calendar Chromium's GPU and
        # utility processes spin and its pages never settle; the server under test keeps the fake clock.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("FAKETIME")}
        chromium = p.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS, env=env)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A page that may load only from 127.0.0.1: anything else is recorded and refused."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    outside: list[str] = []

    def only_loopback(route):
        url = route.request.url
        if url.startswith(("http://127.0.0.1:", "data:", "about:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    context.route("**/*", only_loopback)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.outside_requests = outside
    page.script_errors = errors
    yield page
    context.close()
    assert not outside, f"the page tried to load from outside 127.0.0.1: {outside}"
    assert not errors, f"script errors: {errors}"


@pytest.fixture(scope="session")
def dashboard(tracked_run):
    """The dashboard of the tracked run's runs directory, served by uvicorn in a thread."""
    from runtime.dashboard.app import DashboardConfig
    from runtime.dashboard.server import start_in_thread

    served = start_in_thread(DashboardConfig(runs_dir=tracked_run.root, poll_s=0.5))
    yield served
    served.stop()
