"""Providers are found by name: entry points merged with the ones that ship in runtime/providers."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import JobSpecError
from planner.job import load_job
from runtime.control.clock import ManualClock
from runtime.providers import registry
from runtime.providers.base import ProviderContext
from runtime.providers.local import LocalProvider
from tests.run.helpers import write_job


def _entry_points(*pairs: tuple[str, str]):
    points = metadata.EntryPoints(
        metadata.EntryPoint(name=name, value=value, group=registry.GROUP) for name, value in pairs
    )
    return lambda group: points.select(group=group)


def test_the_local_provider_is_known_without_its_entry_point(monkeypatch) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _entry_points())
    assert registry.names() == sorted(registry.BUILT_IN) and "local" in registry.BUILT_IN
    assert registry.load("local") is LocalProvider


def test_an_entry_point_adds_a_provider_in_one_line(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points",
                        _entry_points(("mycloud", "tests.run.test_registry:MyCloud")))
    assert registry.names() == sorted([*registry.BUILT_IN, "mycloud"])
    provider = registry.create("mycloud", ProviderContext(tmp_path, ManualClock()))
    assert isinstance(provider, MyCloud) and provider.built_with.state_dir == tmp_path


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no_such_module_xyz:Provider", "cannot be loaded: No module named 'no_such_module_xyz'"),
        ("runtime.providers.local:Nope", "cannot be loaded"),
        ("runtime.providers.local:children", "is not a runtime.providers.base.Provider subclass"),
    ],
)
def test_a_provider_that_cannot_load_is_refused_by_name(monkeypatch, value: str, message: str) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _entry_points(("broken", value)))
    with pytest.raises(registry.ProviderUnavailable, match=message):
        registry.load("broken")


def test_an_unknown_provider_lists_the_registered_ones() -> None:
    with pytest.raises(registry.ProviderUnavailable, match="'gcp' is not registered; registered providers: .*local"):
        registry.load("gcp")


def test_planner_run_refuses_an_unregistered_provider_before_writing_anything(tmp_path: Path, capsys) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"])
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run"), "--provider", "nimbus"]) == 2
    err = capsys.readouterr().err
    assert "provider 'nimbus' is not registered" in err and "local" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_planner_run_refuses_a_provider_whose_sdk_is_missing(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(registry.metadata, "entry_points", _entry_points(("aws", "no_such_sdk_xyz.ec2:Provider")))
    job = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], extra='provider = "aws"')
    job.write_text(job.read_text().replace('provider = "local"\n', ""))
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "provider 'aws' (no_such_sdk_xyz.ec2:Provider) cannot be loaded" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_job_may_name_a_provider_this_version_does_not_ship(tmp_path: Path, capsys) -> None:
    # A new cloud is one module and one entry-point line: the job file needs no new value.
    job = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"])
    job.write_text(job.read_text().replace('provider = "local"', 'provider = "mycloud"'))
    assert load_job(job).run.provider == "mycloud"
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run")]) == 2  # not installed here
    assert "provider 'mycloud' is not registered" in capsys.readouterr().err
    job.write_text(job.read_text().replace('provider = "mycloud"', 'provider = "My Cloud!"'))
    with pytest.raises(JobSpecError, match="run.provider"):
        load_job(job)


class MyCloud(LocalProvider):
    """A "new cloud" for the registry test: built from the context, nothing else."""

    name = "mycloud"

    @classmethod
    def from_context(cls, context: ProviderContext) -> MyCloud:
        provider = cls(context.state_dir, clock=context.clock)
        provider.built_with = context
        return provider
