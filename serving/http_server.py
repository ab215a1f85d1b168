"""uvicorn running the serving app on a socket bound up front, in the foreground or in a thread.

The socket is bound when the server is made, so a busy port is a clear error at start and port 0 is
known before serving (the CLI prints it, tests connect to it). Connections are handled by asyncio, so
idle ones cost a little memory each and hold no thread; the reads run in Starlette's thread pool.
"""

from __future__ import annotations

import copy
import socket
import threading

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from lakestream.config import Config, ConfigError
from serving.http_app import build_app
from serving.serve import MetricsService

#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_S = 5
#: Connections the kernel queues while the server is busy accepting.
BACKLOG = 2048


class HttpServer:
    """``lakestream serve``'s server: :meth:`run` until SIGINT/SIGTERM, or :meth:`start` / :meth:`stop`."""

    def __init__(self, cfg: Config, *, quiet: bool = False, service: MetricsService | None = None) -> None:
        host, port = cfg.serve.host, cfg.serve.port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"serve.host/serve.port: cannot listen on {host}:{port} ({exc.strerror}); "
                "pass another --port (0: a free one) or --host"
            ) from None
        sock.listen(BACKLOG)  # connections queue from now on, before the loop runs
        self.socket = sock
        #: What the endpoints answer (its caches, for tests and tools).
        self.service = service or MetricsService(cfg)
        #: (host, port) as bound; port 0 resolved.
        self.address: tuple[str, int] = (str(sock.getsockname()[0]), int(sock.getsockname()[1]))
        logging_config = copy.deepcopy(LOGGING_CONFIG)
        logging_config["loggers"]["uvicorn.error"]["level"] = "WARNING"  # our own start line instead
        logging_config["handlers"]["access"]["stream"] = "ext://sys.stderr"  # stdout: the start line only
        self._server = uvicorn.Server(
            uvicorn.Config(
                build_app(cfg, self.service),
                log_config=logging_config,
                access_log=not quiet,
                lifespan="off",
                proxy_headers=False,  # nothing forwards to it: the peer is the client
                server_header=False,
                timeout_keep_alive=KEEP_ALIVE_S,
                backlog=BACKLOG,
            )
        )
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM (main thread) or :meth:`stop`."""
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self.socket.close()

    def start(self) -> HttpServer:
        """Serve in a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self.run, name="lakestream-serve", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread ended before it started serving")
            self._thread.join(timeout=0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open connections are closed) and wait for the thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    @property
    def url(self) -> str:
        """``http://host:port`` as bound."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
