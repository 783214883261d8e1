"""What runs on every cloud node: heartbeats, the notice watcher, torchrun, and the stage mirror.

The bootstrap (:mod:`runtime.providers.bootstrap`) execs ``python -m
runtime.providers.node_agent`` with its JSON config in ``$DANLU_AGENT_CONFIG``. The agent
talks to the controller only through the run's *stage* in object storage (layout in
:class:`Stage`), so a node needs no inbound port but the rendezvous one::

    heartbeat (every heartbeat_s)  -> <stage>/nodes/<node>/heartbeat.json
    spec.json naming this node     <- <stage>/launches/<launch>/spec.json (the launch it was made for)
    torchrun (argv, never a shell) in the unpacked bundle, DANLU_RUN_DIR node-local
    status.json (rank 0's node)    -> <stage>/launches/<launch>/status.json
    control.json                   <- <stage>/launches/<launch>/control.json (and, on an interruption
                                      notice, a stop the agent asks for itself, at once)
    meter.json ([tracking] runs)   <- <stage>/launches/<launch>/meter.json (the spend figures)
    stop.json                      <- the controller releases the launch: SIGTERM torchrun
    log tail                       -> <stage>/nodes/<node>/log.txt

A spec is taken only when it names this node *and* its ``boot`` nonce (a fresh one per
provision), so files a dead controller left under a reused node name are never obeyed.
The agent never exits on its own: it waits for the next launch until the instance goes.

Environment overrides (how the test data plane points a node at 127.0.0.1):
``DANLU_METADATA_URL`` (the metadata service), ``DANLU_NODE_ADDRESS`` (the address node 0
reports for rendezvous; default its private IP), ``DANLU_NODE_HOME`` (its work folder).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runtime.providers.entrypoint import torchrun_entry
from runtime.tracking import ENV_TRACKING
from runtime.tracking.meter import METER_FILE
from runtime.training.contract import CONTROL_FILE, request_checkpoint

__all__ = [
    "CONFIG_ENV",
    "NodeAgent",
    "Stage",
    "main",
    "torchrun_argv",
]

log = logging.getLogger("runtime.providers.node_agent")

CONFIG_ENV = "DANLU_AGENT_CONFIG"
LOG_TAIL_BYTES = 64 * 1024
MIRRORED_DOWN = (CONTROL_FILE, METER_FILE)
"""The controller's files for the workers: checkpoint requests, and (a launch with ``DANLU_TRACKING``)
the spend figures the trackers log."""


class Stage:
    """The run's folder in object storage (any fsspec URL); every file one JSON object, one PUT.

    ::

        <stage>/bundle-<sha256>.tar.gz
        <stage>/launches/<launch>/{spec,control,meter,status,stop}.json
        <stage>/nodes/<node>/{heartbeat,ack}.json, log.txt
    """

    def __init__(self, url: str):
        import fsspec.core

        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def read_bytes(self, *parts: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(*parts))
        except FileNotFoundError:
            return None

    def read_json(self, *parts: str) -> dict[str, Any] | None:
        """The object, or None when it is missing or (a local stage mid-write) not JSON yet."""
        raw = self.read_bytes(*parts)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def write_bytes(self, data: bytes, *parts: str) -> None:
        path = self.path(*parts)
        if "file" in ((self.fs.protocol,) if isinstance(self.fs.protocol, str) else self.fs.protocol):
            # A local stage (tests): rename into place, as atomic as an object PUT.
            from danlu import atomic_file

            atomic_file.write_bytes(path, data, mode=0o600)
            return
        self.fs.pipe_file(path, data)

    def write_json(self, value: dict[str, Any], *parts: str) -> None:
        self.write_bytes(json.dumps(value, sort_keys=True).encode(), *parts)

    def remove(self, *parts: str) -> None:
        try:
            self.fs.rm(self.path(*parts), recursive=True)
        except FileNotFoundError:
            pass


def torchrun_argv(spec: dict[str, Any], *, is_host: bool) -> list[str]:
    """The torchrun command line for one launch spec: c10d over TCP at node 0, no restarts in place."""
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={int(spec['nnodes'])}", f"--nproc-per-node={int(spec['nproc_per_node'])}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={spec['rdzv_endpoint']}", f"--rdzv-id={spec['rdzv_id']}",
        # is_host says which agent serves the store: on one machine (tests) every address matches.
        (f"--rdzv-conf=join_timeout={float(spec['rdzv_timeout_s']):g},last_call_timeout=1,"
         f"is_host={'1' if is_host else '0'}"),
        "--max-restarts=0", "--monitor-interval=0.5", f"--shutdown-timeout={float(spec['shutdown_timeout_s']):g}",
    ]
    return argv + torchrun_entry(spec["argv"])


def _private_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


def _ephemeral_ports() -> range:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


def _reserve_port(address: str, *, tries: int = 200) -> socket.socket:
    """A socket bound to a free port outside the ephemeral range, held until torchrun's store takes it.

    A port from ``bind(0)`` is ephemeral: between choosing it at boot and node 0's c10d store
    binding it (the other nodes' boot, the bundle: seconds to minutes) an outgoing connection may
    take it as its local port. The store then cannot bind, node 0 fails at once and the others
    wait out the rendezvous timeout (seen on a busy CI machine). A port outside that range is
    never handed to a connection, and the bound socket keeps other agents on the host off it.
    """
    import random

    ephemeral = _ephemeral_ports()
    host = address if address != "0.0.0.0" else ""
    candidates = [p for p in random.sample(range(1024, 65536), tries) if p not in ephemeral]
    for port in candidates + [0]:  # 0: the whole range is ephemeral; take what the kernel gives
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
            return sock
        except OSError:
            sock.close()
    raise OSError(f"no free TCP port on {address!r} for the rendezvous")


class NodeAgent:
    """One node's agent (see the module docstring); :meth:`serve` runs until killed."""

    def __init__(self, config: dict[str, Any], *, environ: dict[str, str] | None = None):
        env = dict(os.environ if environ is None else environ)
        self.config = config
        self.env = env
        self.node = str(config["node"])
        self.boot = str(config["boot"])
        self.stage = Stage(str(config["stage"]))
        self.cloud = str(config.get("cloud", "aws"))
        self.expected_launch = str(config["launch"]) if config.get("launch") else None
        self.heartbeat_s = float(config.get("heartbeat_s", 5.0))
        self.metadata_url = env.get("DANLU_METADATA_URL") or str(config.get("metadata_url", ""))
        home = env.get("DANLU_NODE_HOME") or ("/var/lib/danlu" if os.geteuid() == 0 else "~/.danlu-node")
        self.home = Path(home).expanduser()
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.address = env.get("DANLU_NODE_ADDRESS") or _private_address()
        self._port_hold: socket.socket | None = _reserve_port(self.address)
        self.port = int(self._port_hold.getsockname()[1])
        self.seq = 0
        self.state = "booting"
        self.launch: str | None = None
        self.done: set[str] = set()
        self.returncode: int | None = None
        self.error: str | None = None
        self.notice: Any = None
        self.acked = False
        self.process: subprocess.Popen[bytes] | None = None
        self.run_dir: Path | None = None
        self.log_path: Path | None = None
        self._status_sent: bytes | None = None
        self._seen: dict[str, bytes] = {}  # what was mirrored down, by file name
        self._mirrored: tuple[str, ...] = ()
        self._stop_at: float | None = None
        self._stop_asked = False  # the agent's own stop request for the running launch (a notice)
        self._wake = threading.Event()
        self._watch = None

    # -- the loop -------------------------------------------------------------------------
    def serve(self, *, until: float | None = None) -> None:
        """Heartbeat and follow launches; returns only at ``until`` (monotonic s; tests)."""
        self._start_watch()
        self.state = "ready"
        tick = 0
        while until is None or time.monotonic() < until:
            try:
                self.step(tick)
                self.error = None
            except Exception as exc:  # noqa: BLE001 -- the agent must outlive any one failed request
                self.error = f"{type(exc).__name__}: {exc}"[:500]
                log.warning("node agent: %s", self.error)
                try:
                    self.heartbeat()
                except Exception as again:  # noqa: BLE001 -- the stage itself is unreachable: retry next tick
                    log.warning("node agent: heartbeat failed: %s", again)
            tick += 1
            self._wake.wait(self.heartbeat_s)
            self._wake.clear()

    def step(self, tick: int) -> None:
        """One round: follow the running launch or look for the next one, then heartbeat."""
        if self.process is not None:
            self._follow(tick)
        else:
            self._look_for_launch()
        self._acknowledge()
        self.heartbeat()

    def heartbeat(self) -> None:
        self.seq += 1
        notice = asdict(self.notice) if self.notice is not None else None
        self.stage.write_json({
            "state": self.state, "seq": self.seq, "time": time.time(), "boot": self.boot, "node": self.node,
            "address": self.address, "port": self.port, "launch": self.launch, "returncode": self.returncode,
            "notice": notice, "error": self.error,
        }, "nodes", self.node, "heartbeat.json")

    # -- notices --------------------------------------------------------------------------
    def _start_watch(self) -> None:
        if not self.metadata_url:
            return
        from runtime.providers import notices

        watcher = notices.watcher_for(self.cloud, self.metadata_url, resource_name=self.node)
        self._watch = notices.NoticeWatch(watcher, interval_s=min(self.heartbeat_s, 5.0), on_notice=self._noticed)
        self._watch.start()

    def _noticed(self, notice: Any) -> None:
        from runtime.providers.notices import INTERRUPTION

        if self.notice is None or notice.kind == INTERRUPTION:
            self.notice = notice
        if notice.kind == INTERRUPTION:
            self._ask_to_stop(notice)
        self._wake.set()  # report it now, not at the next heartbeat

    def _ask_to_stop(self, notice: Any) -> None:
        """Ask this node's workers to checkpoint and stop now. The controller asks too, but only once
        the notice has gone up in a heartbeat and its request has come down through the stage: up to
        two heartbeats of a lead time that is 30 s on GCP. Every rank agrees on a stop any rank saw,
        so one node's request stops the launch."""
        run_dir, process = self.run_dir, self.process
        if self._stop_asked or run_dir is None or process is None or process.poll() is not None:
            return
        self._stop_asked = True
        request = request_checkpoint(run_dir / CONTROL_FILE, "stop",
                                     reason=f"{notice.cloud} interruption notice on {self.node} (its node agent)")
        log.info("node %s: asked the workers to stop (%s)", self.node, request.id)

    def _acknowledge(self) -> None:
        """Azure: the controller says the checkpoint is safe; let the eviction go ahead."""
        if self.acked or self.notice is None or self._watch is None or not hasattr(self._watch.watcher, "acknowledge"):
            return
        ack = self.stage.read_json("nodes", self.node, "ack.json")
        if ack is not None and ack.get("boot") == self.boot:
            self._watch.watcher.acknowledge(self.notice)
            self.acked = True

    # -- launches -------------------------------------------------------------------------
    def _look_for_launch(self) -> None:
        # A node is provisioned for one launch (its name says which); its spec appears when the
        # controller has seen every node of the launch ready.
        launch = self.expected_launch
        if launch is None or launch in self.done:
            return
        spec = self.stage.read_json("launches", launch, "spec.json")
        if spec is None:
            return
        mine = [n for n in spec.get("nodes", []) if n.get("name") == self.node and n.get("boot") == self.boot]
        if not mine:
            return
        self._start(launch, spec, int(mine[0]["index"]))

    def _start(self, launch: str, spec: dict[str, Any], index: int) -> None:
        from runtime.providers import bundle

        base = self.home / "launches" / launch
        code, run_dir = base / "code", base / "run"
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = str(spec["bundle"])
        data = self.stage.read_bytes(name)
        if data is None:
            raise RuntimeError(f"the code bundle {name} is not in the stage")
        bundle.unpack(data, code, expected_sha256=name[len("bundle-"):-len(".tar.gz")])
        env = {
            **self.env, "OMP_NUM_THREADS": self.env.get("OMP_NUM_THREADS", "1"),
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": f"{float(spec['shutdown_timeout_s']):g}",
            **{str(k): str(v) for k, v in spec.get("env", {}).items()},
            "DANLU_RUN_DIR": str(run_dir), "DANLU_NODE_ID": self.node,
        }
        env.pop(CONFIG_ENV, None)
        self.log_path = base / "torchrun.log"
        if self._port_hold is not None:  # node 0's store binds it now (the others never use theirs)
            self._port_hold.close()
            self._port_hold = None
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                torchrun_argv(spec, is_host=index == 0), cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.launch, self.run_dir, self.returncode, self.state = launch, run_dir, None, "running"
        self._status_sent = None
        self._seen = {}
        self._mirrored = MIRRORED_DOWN if ENV_TRACKING in env else (CONTROL_FILE,)
        self._stop_at = None
        self._stop_asked = False
        log.info("node %s: launch %s started (pid %d)", self.node, launch, self.process.pid)

    def _follow(self, tick: int) -> None:
        assert self.process is not None and self.launch is not None and self.run_dir is not None
        for name in self._mirrored:
            self._mirror_down(name)
        stop = self.stage.read_json("launches", self.launch, "stop.json")
        if stop is not None and self._stop_at is None:
            self._stop_at = time.monotonic() + float(stop.get("grace_s", 10.0))
            self._signal(signal.SIGTERM)  # torchrun forwards it: the workers checkpoint and exit
        elif self._stop_at is not None and time.monotonic() > self._stop_at:
            self._signal(signal.SIGKILL)
        rc = self.process.poll()
        self._send_status()  # before "exited": the controller reads the final status after it
        if tick % 5 == 0 or rc is not None:
            self._send_log()
        if rc is not None:
            self.done.add(self.launch)
            self.returncode, self.state, self.process = rc, "exited", None
            log.info("node %s: launch %s exited with %d", self.node, self.launch, rc)

    def _mirror_down(self, name: str) -> None:
        """The controller's file for the workers, from the stage into the node-local run dir (atomically:
        the session reads it at any moment)."""
        assert self.run_dir is not None and self.launch is not None
        data = self.stage.read_bytes("launches", self.launch, name)
        if data is not None and data != self._seen.get(name):
            from danlu import atomic_file

            atomic_file.write_bytes(self.run_dir / name, data, mode=0o600)
            self._seen[name] = data

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, sig)
            except ProcessLookupError:
                pass

    def _send_status(self) -> None:
        """Rank 0 writes status.json on whichever node it landed on: that node mirrors it up."""
        assert self.run_dir is not None and self.launch is not None
        try:
            data = (self.run_dir / "status.json").read_bytes()
        except FileNotFoundError:
            return
        if data != self._status_sent:
            self.stage.write_bytes(data, "launches", self.launch, "status.json")
            self._status_sent = data

    def _send_log(self) -> None:
        if self.log_path is None or not self.log_path.exists():
            return
        with self.log_path.open("rb") as f:
            f.seek(max(0, self.log_path.stat().st_size - LOG_TAIL_BYTES))
            self.stage.write_bytes(f.read(), "nodes", self.node, "log.txt")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # The Azure SDK (adlfs) logs every HTTP request and its headers at INFO: a heartbeat's worth of noise.
    logging.getLogger("azure").setLevel(logging.WARNING)
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        print(f"node agent: ${CONFIG_ENV} is not set (the bootstrap sets it)", file=sys.stderr)
        return 2
    NodeAgent(json.loads(raw)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
