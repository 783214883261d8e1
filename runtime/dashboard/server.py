"""Serving the dashboard with uvicorn: on the main thread (``planner dashboard``) or in a thread (tests).

uvicorn's access log is off: with a token, a first request's address holds it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from danlu.extras import require
from runtime.dashboard.app import DashboardConfig, create_app

__all__ = ["Served", "serve", "start_in_thread"]


def _server(config: DashboardConfig, host: str, port: int):
    uvicorn = require("uvicorn", "dashboard", feature="planner dashboard")
    settings = uvicorn.Config(create_app(config), host=host, port=port, log_level="warning", access_log=False,
                              timeout_graceful_shutdown=2, lifespan="off", server_header=False)
    return uvicorn.Server(settings)


def serve(config: DashboardConfig, host: str, port: int, announce: Callable[[int], None] | None = None) -> None:
    """Serve until Ctrl-C. The socket is bound first, so ``announce(port)`` runs once it accepts connections.

    Raises:
        OSError: the address cannot be bound (in use, not this machine's).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    if announce is not None:
        announce(sock.getsockname()[1])
    _server(config, host, port).run(sockets=[sock])


@dataclass
class Served:
    """A dashboard served from a background thread; :meth:`stop` ends it."""

    server: object
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_in_thread(config: DashboardConfig, host: str = "127.0.0.1", port: int = 0,
                    timeout_s: float = 30.0) -> Served:
    """Start serving in a daemon thread; returns once the socket listens (``port`` 0: any free port)."""
    server = _server(config, host, port)
    thread = threading.Thread(target=server.run, name="danlu-dashboard", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not start listening")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return Served(server, thread, host, bound)
