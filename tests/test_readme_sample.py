"""The README's `--json` sample is real output: every figure it shows is what the quote prints today.

`age_days` depends on the calendar (it counts to the day the quote runs), so it is the one value
only checked for its type; `...` in the sample stands for entries left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from planner.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _sample() -> dict:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```json\n(\{\"job\": \"resnet50-imagenet-90ep\".*?)```", text, re.S).group(1)
    return json.loads(block.replace("[...]", "[]").replace(", ...]", "]"))


def _matches(shown, real, path: str) -> None:
    if isinstance(shown, dict):
        assert isinstance(real, dict), path
        for key, value in shown.items():
            assert key in real, f"{path}.{key} is not in the output"
            if key != "age_days":
                _matches(value, real[key], f"{path}.{key}")
        assert isinstance(real.get("age_days", 0), int)
    elif isinstance(shown, list):
        assert isinstance(real, list) and len(real) >= len(shown), path
        for i, value in enumerate(shown):
            _matches(value, real[i], f"{path}[{i}]")
    else:
        assert shown == real, f"{path}: the README shows {shown!r}, the quote prints {real!r}"


def test_the_readme_json_sample_is_what_the_quote_prints(capsys):
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet50-imagenet.toml"
    assert main(["quote", str(example), "--json", "--no-cache"]) == 0
    _matches(_sample(), json.loads(capsys.readouterr().out), "$")
