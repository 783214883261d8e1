from pathlib import Path

import pytest

from planner.errors import JobSpecError
from planner.job import load_job

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    p = tmp_path / "job.toml"
    p.write_text(text)
    return p


def problems(tmp_path, text):
    with pytest.raises(JobSpecError) as info:
        load_job(write(tmp_path, text))
    assert str(tmp_path / "job.toml") in str(info.value)
    return info.value.problems


@pytest.mark.parametrize("example", sorted((REPO / "examples").glob("*.toml")))
def test_examples_are_valid(example):
    job = load_job(example)
    assert job.name


def test_unknown_key_gets_did_you_mean(tmp_path):
    out = problems(tmp_path, 'name="x"\n[workload]\nmodel="gpt-7b"\ntokens=1e9\n[constraints]\ndedline_hours=3\n')
    assert out == ["constraints.dedline_hours: unknown key; did you mean 'constraints.deadline_hours'?"]


def test_unknown_section(tmp_path):
    out = problems(tmp_path, 'name="x"\n[workload]\nmodel="gpt-7b"\ntokens=1e9\n[constrains]\n')
    assert out[0].startswith("constrains: unknown key; did you mean 'constraints'")


def test_exactly_one_amount(tmp_path):
    out = problems(tmp_path, 'name="x"\n[workload]\nmodel="gpt-7b"\ntokens=1e9\nsamples=3\n')
    assert "exactly one of tokens, samples, steps, gpu_hours (found tokens, samples)" in out[0]
    out = problems(tmp_path, 'name="x"\n[workload]\nmodel="gpt-7b"\n')
    assert "(found none)" in out[0]


def test_gpu_hours_needs_reference_gpu(tmp_path):
    out = problems(tmp_path, 'name="x"\n[workload]\nmodel="gpt-7b"\ngpu_hours=100\n')
    assert out[0].startswith("workload: gpu_hours needs reference_gpu")


def test_bad_values_name_the_key_path(tmp_path):
    text = (
        'name="x"\n[workload]\nmodel="gpt-7b"\ntokens=1e9\n[constraints]\ndeadline_hours=-1\n'
        '[purchase]\nallow=["spot","lease"]\n[[purchase.held]]\ncloud="aws"\nregion="us-east-1"\n'
        'instance_type="p4d.24xlarge"\ncount=0\nuntil=2027-01-01\n[run]\nentrypoint="python train.py"\n'
    )
    out = problems(tmp_path, text)
    assert any(p.startswith("constraints.deadline_hours: Input should be greater than 0 (got -1)") for p in out)
    assert any(p.startswith("purchase.allow[1]:") and "'lease'" in p for p in out)
    assert any(p.startswith("purchase.held[0].count:") for p in out)
    assert any(p.startswith("run.entrypoint: entrypoint is an argv list") for p in out)


def test_not_toml_and_missing_file(tmp_path):
    out = problems(tmp_path, "name = \n")
    assert out[0].startswith("not valid TOML")
    with pytest.raises(JobSpecError) as info:
        load_job(tmp_path / "nope.toml")
    assert info.value.problems == ["file not found"]
