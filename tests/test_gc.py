"""`planner gc`: instances with danlu's tags whose run ended or whose run directory is gone.

A test-only cloud provider is registered in the provider registry; its ``compute()``
hands gc an in-memory ComputeAPI holding the instances the test puts there.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from planner.cli import main
from pricing.pool import Pool
from runtime.control.queue_record import QUEUE_RUN_FILE
from runtime.control.run_home import HOME_FILE
from runtime.control.run_start import run_id_for
from runtime.control.run_state import LaunchRecord, load_state, save_state
from runtime.providers import registry
from runtime.providers.base import Provider
from runtime.providers.cloud_api import (
    TAG_HOME,
    TAG_LAUNCH,
    TAG_NODE,
    TAG_RUN,
    ComputeAPI,
    ComputeAPIError,
    Instance,
    InstanceRequest,
    InstanceState,
)
from runtime.providers.cloud import node_name
from runtime.providers.gcp import label_value
from tests.run.fake_run import new_run, phase


class MemoryCompute(ComputeAPI):
    """A cloud that exists in a dict; ``fail`` makes every call raise like a cloud refusing."""

    def __init__(self, cloud: str):
        self.cloud = cloud
        self.instances: dict[str, Instance] = {}
        self.deleted: list[str] = []
        self.fail: str | None = None

    def add(self, id_: str, run: str, *, launch: str = "l-1", hourly_usd: float | None = None,
            home: str | None = None) -> None:
        tags = {TAG_RUN: self.tag_value(run), TAG_LAUNCH: launch, TAG_NODE: f"{run}-{launch}-n0"}
        if home is not None:
            tags[TAG_HOME] = self.tag_value(home)
        self.instances[id_] = Instance(id=id_, name=tags[TAG_NODE], state=InstanceState.RUNNING, zone="z-1",
                                       tags=tags, hourly_usd=hourly_usd)

    def _check(self) -> None:
        if self.fail:
            raise ComputeAPIError(f"{self.cloud}: {self.fail}", code="AuthFailure")

    def create(self, request: InstanceRequest) -> list[Instance]:
        raise AssertionError("gc never creates instances")

    def describe(self, ids: Sequence[str]) -> list[Instance]:
        self._check()
        return [self.instances[i] for i in ids]

    def delete(self, ids: Sequence[str]) -> None:
        self._check()
        for i in ids:
            self.instances.pop(i, None)
            self.deleted.append(i)

    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        self._check()
        return [inst for inst in self.instances.values() if key in inst.tags and value in (None, inst.tags[key])]


CLOUDS: dict[str, MemoryCompute] = {}


class _MemoryProvider(Provider):
    remote = True
    cloud = ""

    @classmethod
    def compute(cls, options: Mapping[str, object]) -> ComputeAPI:
        assert options == {}
        return CLOUDS[cls.cloud]

    # gc never builds a provider for a run: the rest of the interface is never called.
    def provision(self, pool, *, nodes, launch_id):
        raise NotImplementedError

    def wait_ready(self, nodes, *, timeout_s):
        raise NotImplementedError

    def run(self, nodes, launch):
        raise NotImplementedError

    def poll(self, nodes):
        raise NotImplementedError

    def interruption_notice(self, node):
        raise NotImplementedError

    def acknowledge(self, node, notice):
        raise NotImplementedError

    def terminate(self, nodes, *, grace_s):
        raise NotImplementedError

    def release_stale(self, nodes):
        raise NotImplementedError

    def close(self):
        pass


class LabelCompute(MemoryCompute):
    """A cloud that keeps tags as GCE keeps labels: lower case, ``-`` for what a label cannot hold."""

    def tag_value(self, value: str) -> str:
        return label_value(value)


class MemCloudA(_MemoryProvider):
    cloud = "mema"


class MemCloudB(_MemoryProvider):
    cloud = "memb"


@pytest.fixture
def clouds(monkeypatch: pytest.MonkeyPatch) -> dict[str, MemoryCompute]:
    CLOUDS.clear()
    CLOUDS.update({"mema": MemoryCompute("mema"), "memb": MemoryCompute("memb")})
    monkeypatch.setattr(registry, "_targets", lambda: {
        "local": "runtime.providers.local:LocalProvider",
        "mema": f"{__name__}:MemCloudA", "memb": f"{__name__}:MemCloudB",
    })
    return CLOUDS


def _run(tmp_path: Path, where: Path, status: str) -> Path:
    """A run made in ``where`` (its state's run id as planner run gives it there), ended with ``status``."""
    made = tmp_path / "made" / where.relative_to(tmp_path)
    made.mkdir(parents=True)
    state = load_state(new_run(made))
    state.status = status
    state.run_id = run_id_for(where, None)  # as if started in ``where``, not where new_run made it
    where.parent.mkdir(parents=True, exist_ok=True)
    (made / "run").rename(where)
    save_state(where, state)
    return where


def _runs(tmp_path: Path) -> Path:
    """runs/ended (completed), runs/live (running); a third run's directory was deleted."""
    runs = tmp_path / "runs"
    for name, status in (("ended", "completed"), ("live", "running")):
        _run(tmp_path, runs / name, status)
    return runs


@pytest.mark.parametrize("columns", [None, "80"], ids=["120-columns", "80-columns"])
def test_gc_lists_orphans_with_their_cost_and_deletes_them_on_yes(
        tmp_path: Path, clouds, capsys: pytest.CaptureFixture[str], monkeypatch, columns) -> None:
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    runs = _runs(tmp_path)
    a, b = clouds["mema"], clouds["memb"]
    a.add("i-ended", "ended", hourly_usd=1.25)
    a.add("i-live", "live", hourly_usd=2.0)
    b.add("i-gone", "deleted-run")  # no price from the cloud, no run state to read one from

    assert main(["gc", "--runs-dir", str(runs)]) == 0  # a dry run
    out = capsys.readouterr().out
    # Only the command to paste may run past the width (it is never broken across lines).
    assert max(len(line) for line in out.splitlines() if "planner gc --yes" not in line) <= int(columns or 120)
    for whole in ("i-ended", "i-gone", "i-live", "ended", "deleted-run", "$1.2500"):  # never cut
        assert re.search(rf"(?<![\w-]){re.escape(whole)}(?![\w-])", out), whole
    if columns:  # narrow: reasons wrap inside their cells, so only whole names can be checked
        out = out.replace("\n", " ")
        assert "orphans cost $1.2500/h (+1 of unknown price)" in " ".join(out.split())
        assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 0
        assert a.deleted == ["i-ended"] and b.deleted == ["i-gone"]
        return
    assert "i-ended" in out and "run ended (completed)" in out and "$1.2500" in out
    assert "i-gone" in out and "run directory gone" in out
    assert "kept: the run is running" in out and "kept 1 instance(s)" in out
    assert "orphans cost $1.2500/h (+1 of unknown price)" in out
    assert "dry run: nothing deleted" in out and f"planner gc --yes --runs-dir {runs}" in out
    assert a.deleted == [] and b.deleted == []

    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 0
    assert a.deleted == ["i-ended"] and b.deleted == ["i-gone"]
    assert list(a.instances) == ["i-live"]  # the running run keeps its node

    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 0
    assert "no orphaned instances" in capsys.readouterr().out
    assert a.deleted == ["i-ended"] and b.deleted == ["i-gone"]


def test_an_ended_runs_instance_is_priced_from_the_run_when_the_cloud_does_not_say(
        tmp_path: Path, clouds, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _runs(tmp_path)
    state = load_state(runs / "ended")
    pool = Pool.from_dict(phase(hourly_usd=0.3125))  # what the controller recorded for launch l-2
    state.launches.append(LaunchRecord(launch_id="l-2", pool=pool, nodes=1, world_size=1, start_step=0,
                                       provisioned_at=state.origin, released_at=state.origin + 60))
    save_state(runs / "ended", state)
    clouds["mema"].add("i-ended", "ended", launch="l-2")
    assert main(["gc", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "$0.3125" in out and "orphans cost $0.3125/h" in out


def test_a_cloud_that_errors_is_one_line_and_the_others_are_collected(
        tmp_path: Path, clouds, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _runs(tmp_path)
    clouds["mema"].fail = "AuthFailure: the security token is invalid"
    clouds["memb"].add("i-gone", "deleted-run", hourly_usd=0.5)
    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if "security token" in line]
    assert lines == ["mema: cannot list instances: mema: AuthFailure: the security token is invalid"]
    assert "Traceback" not in captured.out + captured.err
    assert clouds["memb"].deleted == ["i-gone"]


def test_without_cloud_providers_gc_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(registry, "_targets", lambda: {"local": "runtime.providers.local:LocalProvider"})
    assert main(["gc", "--runs-dir", str(tmp_path / "nowhere")]) == 0
    assert "no cloud providers installed" in capsys.readouterr().out


def test_bad_input_is_one_clear_error(tmp_path: Path, clouds, capsys) -> None:
    assert main(["gc", "--runs-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "nowhere: no runs directory there" in err and "--runs-dir" in err
    assert main(["gc", "--runs-dir", str(tmp_path), "--provider", "nosuch"]) == 2
    assert "--provider nosuch: not registered" in capsys.readouterr().err


def test_gc_asks_the_clouds_not_the_provider_that_routes_to_them(
        tmp_path: Path, clouds, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``auto`` owns no instances (its clouds' providers list them): gc must not count it as a cloud that failed."""
    monkeypatch.setattr(registry, "_targets", lambda: {
        "local": "runtime.providers.local:LocalProvider", "auto": "runtime.providers.auto:AutoProvider",
        "mema": f"{__name__}:MemCloudA",
    })
    runs = _runs(tmp_path)
    clouds["mema"].add("i-ended", "ended", hourly_usd=1.0)
    assert main(["gc", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "i-ended" in out and "auto" not in out


def test_the_jobs_of_queues_are_told_apart_and_a_running_ones_instances_kept(tmp_path: Path, clouds, capsys) -> None:
    # Two queues of the team each ran a job called "train": their instances carry the queue's directory in
    # their run id, so one queue's ended job never takes the other's running one down. An instance of a run
    # started before run ids were kept carries the directory's name alone: found by it, kept while it runs.
    runs = tmp_path / "runs"
    for queue in ("nightly-1", "nightly-2"):
        (runs / queue).mkdir(parents=True)
        (runs / queue / QUEUE_RUN_FILE).write_text("{}")
    _run(tmp_path, runs / "nightly-1" / "train", "completed")
    _run(tmp_path, runs / "nightly-2" / "train", "running")
    old = _run(tmp_path, runs / "nightly-2" / "eval", "running")
    state = load_state(old)
    state.run_id = None
    save_state(old, state)
    elsewhere = tmp_path / "big-disk" / "nightly-3"  # a queue kept on another disk, linked into runs/
    elsewhere.mkdir(parents=True)
    (elsewhere / QUEUE_RUN_FILE).write_text("{}")
    (runs / "nightly-3").symlink_to(elsewhere)
    _run(tmp_path, runs / "nightly-3" / "train", "running")
    a = clouds["mema"]
    a.add("i-linked", "nightly-3-train")
    a.add("i-ended", "nightly-1-train")
    a.add("i-live", "nightly-2-train")
    a.add("i-old", "eval")
    a.add("i-bare", "train")  # no run is known by the job's name alone: gone
    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 0
    assert sorted(a.deleted) == ["i-bare", "i-ended"], capsys.readouterr().out
    assert sorted(a.instances) == ["i-linked", "i-live", "i-old"]


def test_a_cloud_that_changes_tags_still_finds_the_run(tmp_path: Path, clouds, monkeypatch, capsys) -> None:
    # A GCE label is lower case: the tag of a run named "GPT-7B-..." comes back as "gpt-7b-...". gc matched
    # it against the directory's name and deleted a running run's VM as "run directory gone".
    clouds["mema"] = LabelCompute("mema")
    runs = tmp_path / "runs"
    _run(tmp_path, runs / "GPT-7B.finetune", "running")
    clouds["mema"].add("i-live", "GPT-7B.finetune")
    assert clouds["mema"].instances["i-live"].tags[TAG_RUN].startswith("gpt-7b-finetune-")
    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 0
    assert "kept: the run is running" in capsys.readouterr().out
    assert clouds["mema"].deleted == []


def _cloud_run(tmp_path: Path, run_dir: Path, status: str = "running"):
    """A run on the test cloud ``mema`` started in ``run_dir``, ended with ``status``; its state."""
    jobs = tmp_path / "jobs" / run_dir.relative_to(tmp_path)
    jobs.mkdir(parents=True)
    made = new_run(jobs, provider="mema", run_dir=run_dir)
    state = load_state(made)
    state.status = status
    save_state(made, state)
    return state


def test_a_cloud_run_is_known_by_its_name_and_its_runs_directorys_home(tmp_path: Path, clouds, capsys) -> None:
    # Alice and Bob each start "bert" from their own runs directory on one cloud account: with the
    # directory's name alone for an id, a resume of one released the other's instances, and their node
    # names clashed (one VM name per zone).
    alice = _cloud_run(tmp_path, tmp_path / "alice" / "bert")
    bob = _cloud_run(tmp_path, tmp_path / "bob" / "bert")
    home = (tmp_path / "alice" / HOME_FILE).read_text().strip()
    assert alice.home == home and alice.run_id == f"bert-{home[:6]}"
    assert bob.home != alice.home and bob.run_id != alice.run_id
    assert node_name(alice.run_id, "l-1", 0) != node_name(bob.run_id, "l-1", 0)
    assert (tmp_path / "alice" / HOME_FILE).stat().st_mode & 0o777 == 0o644
    assert _cloud_run(tmp_path, tmp_path / "alice" / "gpt").home == home  # one home per runs directory
    # `planner status` gives the tags to find the run's instances by in a cloud's console.
    assert main(["status", str(tmp_path / "alice" / "bert"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cloud_tags"] == {TAG_RUN: alice.run_id, TAG_HOME: home}
    assert main(["status", str(tmp_path / "alice" / "bert")]) == 0
    assert f"danlu-run={alice.run_id}, danlu-home={home}" in capsys.readouterr().out
    (tmp_path / "jobs" / "carol").mkdir()
    local = load_state(new_run(tmp_path / "jobs" / "carol", run_dir=tmp_path / "carol" / "bert"))
    assert local.home is None and local.run_id == "bert" and not (tmp_path / "carol" / HOME_FILE).exists()


def test_a_teammates_instances_are_kept_and_any_home_judges_them(tmp_path: Path, clouds, capsys) -> None:
    # Bob's gc used to find Alice's running instance under no run it knew and delete it as "run directory
    # gone". An instance from before instances carried a home is judged as before.
    alice = _cloud_run(tmp_path, tmp_path / "alice" / "bert")
    bob = _cloud_run(tmp_path, tmp_path / "bob" / "gpt")
    old = _cloud_run(tmp_path, tmp_path / "bob" / "old")
    a = clouds["mema"]
    for id_, state in (("i-alice", alice), ("i-bob", bob), ("i-old", old)):
        a.add(id_, state.run_id, home=state.home)
    a.add("i-legacy", "legacy")
    shutil.rmtree(tmp_path / "bob" / "old")
    assert main(["gc", "--runs-dir", str(tmp_path / "bob"), "--json"]) == 0
    why = {i["id"]: i["why"] for i in json.loads(capsys.readouterr().out)["instances"]}
    # Where Alice's home is, as this machine saw it when her run started.
    assert why["i-alice"] == f"kept: from another runs directory (home {alice.home} at {tmp_path / 'alice'})"
    assert main(["gc", "--runs-dir", str(tmp_path / "bob"), "--yes"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert sorted(a.deleted) == ["i-legacy", "i-old"], out
    assert "orphans cost ? (2 of unknown price)" in out
    assert "kept 2 instance(s): 1 of runs still running; 1 started from other runs directories" in out

    # Alice deleted her runs directory whole: gc from an empty one keeps her instance as another's ...
    shutil.rmtree(tmp_path / "alice")
    (tmp_path / "empty").mkdir()
    assert main(["gc", "--runs-dir", str(tmp_path / "empty"), "--yes"]) == 0
    assert sorted(a.instances) == ["i-alice", "i-bob"]
    # ... until told to judge every home as its own, where the running run of Bob's is not to be found either;
    # its dry run's command to paste keeps the flag.
    capsys.readouterr()
    assert main(["gc", "--runs-dir", str(tmp_path / "bob"), "--any-home"]) == 0
    assert f"`planner gc --yes --any-home --runs-dir {tmp_path / 'bob'}`" in capsys.readouterr().out
    assert main(["gc", "--runs-dir", str(tmp_path / "bob"), "--any-home", "--yes"]) == 0
    assert sorted(a.instances) == ["i-bob"]


def test_a_damaged_home_file_is_one_clear_error(tmp_path: Path, clouds, capsys) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / HOME_FILE).write_text("not a home\n")
    clouds["mema"].add("i-1", "x", home="0123456789ab")
    assert main(["gc", "--runs-dir", str(runs), "--yes"]) == 2
    err = capsys.readouterr().err
    assert f"{runs / HOME_FILE}: not a danlu home id" in err and "--any-home" in err and "Traceback" not in err
    assert clouds["mema"].deleted == []


def test_json_is_one_document_and_the_messages_go_to_stderr(tmp_path: Path, clouds, capsys) -> None:
    runs = _runs(tmp_path)
    clouds["mema"].add("i-ended", "ended", hourly_usd=1.25)
    clouds["mema"].add("i-live", "live")
    clouds["memb"].fail = "AuthFailure: the security token is invalid"
    assert main(["gc", "--runs-dir", str(runs), "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["dry_run"] is True and doc["deleted"] == [] and doc["home"] is None
    by_id = {i["id"]: i for i in doc["instances"]}
    assert (by_id["i-ended"]["orphan"], by_id["i-ended"]["why"]) == (True, "run ended (completed)")
    assert (by_id["i-live"]["orphan"], by_id["i-live"]["run"]) == (False, "live")
    assert doc["orphans_usd_per_hour"] == 1.25 and doc["orphans_unpriced"] == 0
    assert doc["failed"] == {"memb": "cannot list instances: memb: AuthFailure: the security token is invalid"}
    assert "memb: cannot list instances" in captured.err and "dry run: nothing deleted" in captured.err
    assert main(["gc", "--runs-dir", str(runs), "--json", "--yes"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] is False and doc["deleted"] == ["i-ended"] and clouds["mema"].deleted == ["i-ended"]


def test_a_cloud_that_could_not_be_asked_is_not_reported_free_of_orphans(tmp_path: Path, clouds, capsys) -> None:
    runs = _runs(tmp_path)
    clouds["memb"].fail = "AuthFailure: the security token is invalid"
    assert main(["gc", "--runs-dir", str(runs)]) == 1
    out = capsys.readouterr().out
    assert "no orphaned instances on mema" in out and "no orphaned instances\n" not in out
    clouds["mema"].fail = "AuthFailure: expired"
    assert main(["gc", "--runs-dir", str(runs)]) == 1
    assert "no cloud could be asked: nothing is known of their instances" in capsys.readouterr().out
