"""The user data of a cloud node: a Python script, fixed code plus one embedded JSON config.

Cloud-init (AWS, Azure) and the GCE guest agent run user data that starts with ``#!`` as
a program; this one is Python so that nothing is ever interpreted by a shell. The only
variable part is the config, embedded as ``repr(json.dumps(config))`` -- a Python string
literal of JSON -- and parsed with ``json.loads``, so no value in it (a node name, a
stage URL, an install spec from ``[run.options]``) can become code.

What the script does:

1. makes danlu importable: when ``import runtime.providers.node_agent`` fails under the
   image's ``python3``, it creates a venv in ``<home>/venv`` and ``pip install``s the
   install spec there (argv lists, no shell);
2. execs ``python -m runtime.providers.node_agent`` with the config in
   ``$DANLU_AGENT_CONFIG``.

Its output goes where the cloud puts user-data output (cloud-init-output.log, the serial console).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "TEMPLATE",
    "config_of",
    "render",
    "render_indexed",
]

TEMPLATE = '''#!/usr/bin/env python3
# danlu node bootstrap (runtime/providers/bootstrap.py): installs danlu if needed, starts the node agent.
import json
import os
import subprocess
import sys

CONFIG = json.loads(__CONFIG__)
if "index_env" in CONFIG:  # one script for every pod of an indexed Kubernetes Job: each takes its own node
    CONFIG.update(CONFIG.pop("nodes")[int(os.environ[CONFIG.pop("index_env")])])


def importable(python):
    probe = [python, "-c", "import runtime.providers.node_agent"]
    return subprocess.run(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def main():
    default_home = "/var/lib/danlu" if os.geteuid() == 0 else os.path.expanduser("~/.danlu-node")
    home = os.environ.get("DANLU_NODE_HOME") or default_home
    os.makedirs(home, mode=0o700, exist_ok=True)
    os.environ["DANLU_NODE_HOME"] = home
    python = sys.executable
    if not importable(python):
        venv = os.path.join(home, "venv")
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=False)
        subprocess.run([python, "-m", "pip", "install", "--quiet", CONFIG["install"]], check=True)
    env = dict(os.environ)
    env["DANLU_AGENT_CONFIG"] = json.dumps(CONFIG)
    env.setdefault("PYTHONUNBUFFERED", "1")
    os.execve(python, [python, "-m", "runtime.providers.node_agent"], env)


main()
'''


def render(config: Mapping[str, Any]) -> str:
    """The user-data script for one node (see the module docstring)."""
    for key in ("node", "boot", "stage", "cloud", "install"):
        if not isinstance(config.get(key), str) or not config[key]:
            raise ValueError(f"bootstrap config needs a non-empty string {key!r}")
    return TEMPLATE.replace("__CONFIG__", repr(json.dumps(dict(config), sort_keys=True)), 1)


def render_indexed(config: Mapping[str, Any], nodes: Sequence[Mapping[str, str]], *, index_env: str) -> str:
    """One script for many nodes: node ``i`` is ``nodes[i]`` (its ``node`` and ``boot``), ``i`` read
    from the environment variable ``index_env`` (a Kubernetes indexed Job's ``JOB_COMPLETION_INDEX``)."""
    if not nodes:
        raise ValueError("an indexed bootstrap needs at least one node")
    for node in nodes:
        render({**config, **node})  # every node's config must be one render() accepts
    entries = [{"node": str(n["node"]), "boot": str(n["boot"])} for n in nodes]
    full = {**config, "node": entries[0]["node"], "boot": entries[0]["boot"], "nodes": entries, "index_env": index_env}
    return TEMPLATE.replace("__CONFIG__", repr(json.dumps(full, sort_keys=True)), 1)


def config_of(script: str) -> dict[str, Any]:
    """The config embedded in a script :func:`render` made (tests, ``planner gc``)."""
    import ast

    marker = "CONFIG = json.loads("
    start = script.index(marker) + len(marker)
    end = script.index(")\n", start)
    return json.loads(ast.literal_eval(script[start:end]))
