"""The entrypoint as torchrun runs it, and the script check `planner run` makes before launching."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runtime.providers.entrypoint import missing_script, torchrun_entry


def test_python_entrypoints_run_with_torchruns_interpreter_and_others_with_no_python() -> None:
    assert torchrun_entry(["python", "train.py", "--lr", "0.1"]) == ["train.py", "--lr", "0.1"]
    assert torchrun_entry([sys.executable, "-m", "pkg.train"]) == ["-m", "pkg.train"]
    assert torchrun_entry(["./train.sh", "fast"]) == ["--no-python", "./train.sh", "fast"]
    assert torchrun_entry(["python"]) == ["--no-python", "python"]


def test_what_is_checked_and_what_is_left_to_the_node(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    assert missing_script(["python", "train.py"], tmp_path, bundled=False) is None
    assert missing_script(["python", "./train.py"], tmp_path, bundled=False) is None
    assert missing_script(["python", "-m", "pkg.train"], tmp_path, bundled=False) is None  # a module
    assert missing_script(["deepspeed", "train.py"], tmp_path, bundled=False) is None  # on PATH
    assert missing_script(["python", "/opt/image/train.py"], tmp_path, bundled=True) is None  # the node's own file
    problem = missing_script(["python", "/opt/image/train.py"], tmp_path, bundled=False)
    assert problem is not None and "'/opt/image/train.py', which is not a file" in problem
    problem = missing_script(["python", "trian.py"], tmp_path, bundled=False)
    assert problem is not None and f"not a file in {tmp_path}" in problem and "To fix: correct the path" in problem


def test_a_script_that_is_not_executable_is_named_with_the_chmod_to_run(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    problem = missing_script(["./train.sh"], tmp_path, bundled=False)
    assert problem is not None and "`chmod +x ./train.sh`" in problem
    script.chmod(0o755)
    assert missing_script(["./train.sh"], tmp_path, bundled=False) is None


def test_a_cloud_run_refuses_a_script_its_code_bundle_leaves_out(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("scratch/\n")
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "train.py").write_text("")
    (tmp_path / "train.py").write_text("")
    assert missing_script(["python", "train.py"], tmp_path, bundled=True) is None
    problem = missing_script(["python", "scratch/train.py"], tmp_path, bundled=True)
    assert problem is not None and "the code bundle" in problem and ".gitignore" in problem
    # On this machine the file is run where it is.
    assert missing_script(["python", "scratch/train.py"], tmp_path, bundled=False) is None


def test_a_cloud_run_refuses_a_script_outside_the_shipped_directory(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "project").mkdir()
    problem = missing_script(["python", "../train.py"], tmp_path / "project", bundled=True)
    assert problem is not None and "outside" in problem and "shipped to the nodes" in problem
