"""Code shipping and the bootstrap: what leaves this machine, and that no value becomes code."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from runtime.providers import bootstrap, bundle
from runtime.providers.cloud import node_name, stage_url


def _names(b: bundle.Bundle) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(b.data), mode="r:gz") as tar:
        return sorted(tar.getnames())


def _shape(script: str) -> str:
    import ast

    tree = ast.parse(script)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = "S"
    return ast.dump(tree)


def test_a_git_tree_ships_tracked_and_unignored_files_only(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "notes.md").write_text("untracked, not ignored\n")
    (root / "data" / "big.bin").write_bytes(b"x" * 1000)
    (root / ".gitignore").write_text("data/\n*.log\n")
    (root / "run.log").write_text("ignored\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "train.py", ".gitignore"], check=True)
    made = bundle.make_bundle(root)
    assert _names(made) == [".gitignore", "notes.md", "train.py"]
    assert made.name == f"bundle-{made.sha256}.tar.gz" and made.files == 3


def test_elsewhere_default_excludes_apply_and_the_archive_is_deterministic(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    for folder in ("pkg", ".venv/lib", "__pycache__", "runs/old"):
        (root / folder).mkdir(parents=True)
    (root / "train.py").write_text("import pkg\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / ".venv" / "lib" / "site.py").write_text("")
    (root / "__pycache__" / "x.pyc").write_bytes(b"")
    (root / "runs" / "old" / "state.json").write_text("{}")
    first = bundle.make_bundle(root)
    assert _names(first) == ["pkg/__init__.py", "train.py"]
    (root / "train.py").touch()  # a new mtime, the same content: the same bundle
    assert bundle.make_bundle(root).name == first.name
    (root / "train.py").write_text("import pkg  # changed\n")
    assert bundle.make_bundle(root).name != first.name


def test_over_the_cap_the_error_names_the_biggest_files(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "weights.pt").write_bytes(b"\0" * 3 * 2**20)
    (root / "train.py").write_text("pass\n")
    with pytest.raises(bundle.BundleError, match=r"over the 2 MiB cap.*weights\.pt \(3\.0 MiB\).*bundle_max_mb"):
        bundle.make_bundle(root, max_bytes=2 * 2**20)


def test_links_out_of_the_tree_are_not_shipped_and_unpack_refuses_escapes(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("pass\n")
    (root / "inside").symlink_to("train.py")
    (root / "outside").symlink_to("/etc/passwd")
    made = bundle.make_bundle(root)
    assert _names(made) == ["inside", "train.py"]
    out = bundle.unpack(made.data, tmp_path / "out", expected_sha256=made.sha256)
    assert (out / "inside").resolve() == (out / "train.py").resolve()
    with pytest.raises(bundle.BundleError, match="does not match its name"):
        bundle.unpack(made.data, tmp_path / "x", expected_sha256="0" * 64)
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(bundle.BundleError):
        bundle.unpack(evil.getvalue(), tmp_path / "y")
    assert not (tmp_path / "escaped.txt").exists()


def test_upload_is_content_addressed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("pass\n")
    made = bundle.make_bundle(root)
    stage = tmp_path / "stage"
    url = bundle.upload(made, str(stage))
    assert Path(url).read_bytes() == made.data
    mtime = Path(url).stat().st_mtime_ns
    bundle.upload(made, str(stage))
    assert Path(url).stat().st_mtime_ns == mtime  # already there: not written again


def test_the_bootstrap_embeds_values_as_data_never_as_code(tmp_path: Path) -> None:
    hostile = "x'); import os; os.system('touch /tmp/pwned') #\"\n$(reboot)"
    config = {"node": "n0", "boot": "b", "stage": "s3://b/p", "cloud": "aws", "install": hostile, "launch": "l-1"}
    script = bootstrap.render(config)
    assert script.startswith("#!/usr/bin/env python3\n")
    assert bootstrap.config_of(script) == config
    # The same program whatever the values: only one string constant differs.
    benign = bootstrap.render({**config, "install": "danlu"})
    assert _shape(script) == _shape(benign)
    with pytest.raises(ValueError, match="'stage'"):
        bootstrap.render({**config, "stage": ""})


def test_node_names_are_valid_cloud_names_and_the_stage_sits_under_the_checkpoints() -> None:
    assert node_name("digits-20261201-120000", "l-3", 1) == "digits-20261201-120000-l-3-n1"
    long = node_name("A_very_long_run_name_" * 5, "l-12", 0)
    assert len(long) <= 63 and long.endswith("-l-12-n0") and long == long.lower() and long[0].isalpha()
    assert node_name("2026_run", "l-1", 0)[0].isalpha()
    assert stage_url("s3://bucket/ckpt/", "run-1") == "s3://bucket/ckpt/_danlu/run-1"
