"""A loopback TCP proxy that holds every message D ms in each direction.

Between edgespec and an RPC worker on one machine, it turns loopback into a
network with a round-trip time of 2 D (plus loopback's), so that tests and the
bench can measure the regime of workers on other machines. What it delays is each
chunk read from a socket (one ``recv``), forwarded D ms after it arrived, in order;
chunks in flight overlap, as on a real link (latency, not bandwidth).

Only loopback: it listens on a loopback address and forwards to one, never to
anything else. Bounded: at most MAX_IN_FLIGHT bytes wait in each direction (the
reader then waits), and closing the proxy closes every connection.

    .venv/bin/python benchmarks/latency_proxy.py --upstream 127.0.0.1:50052 --delay-ms 5
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ipaddress
import socket
import sys
import threading
import time

MAX_IN_FLIGHT = 64 << 20  # bytes waiting per direction before the reader blocks
CHUNK = 1 << 16


def _check_loopback(host: str, what: str) -> str:
    addr = "127.0.0.1" if host == "localhost" else host
    try:
        ok = ipaddress.ip_address(addr).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"the latency proxy only uses loopback; {what} {host!r} is not")
    return addr


class _Pipe:
    """One direction of one connection: read chunks, send each D seconds later."""

    def __init__(self, src: socket.socket, dst: socket.socket, proxy: LatencyProxy, stats: list):
        self.src, self.dst, self.proxy, self.stats = src, dst, proxy, stats
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.in_flight = 0
        self.cond = threading.Condition()
        self.eof = False

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.src.recv(CHUNK)
                if not data:
                    break
                with self.cond:
                    while self.in_flight >= MAX_IN_FLIGHT:
                        self.cond.wait()
                    self.queue.append((time.monotonic() + self.proxy.delay, data))
                    self.in_flight += len(data)
                    self.stats[0] += 1
                    self.stats[1] += len(data)
                    self.cond.notify_all()
        except OSError:
            pass
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _write(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.queue and not self.eof:
                        self.cond.wait()
                    if not self.queue:
                        break
                    due, data = self.queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.dst.sendall(data)
                with self.cond:
                    self.queue.popleft()
                    self.in_flight -= len(data)
                    self.cond.notify_all()
        except OSError:
            pass
        # the other side learns of the close once everything before it was delivered
        for s in (self.dst, self.src):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class LatencyProxy:
    """Listen on loopback, forward each connection to ``upstream`` (loopback too),
    holding every chunk ``delay_ms`` in each direction (``delay``, in seconds, may be
    changed while it runs: it applies to chunks read from then on).

    ``stats``: chunks and bytes sent up (client to upstream) and down, over all
    connections: ``{"up": [chunks, bytes], "down": [chunks, bytes]}``.
    """

    def __init__(
        self,
        upstream: str,
        delay_ms: float,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (_check_loopback(host, "upstream"), int(port))
        if delay_ms < 0:
            raise ValueError(f"delay must be >= 0 ms, not {delay_ms}")
        self.delay = delay_ms / 1000.0
        self.stats = {"up": [0, 0], "down": [0, 0]}
        self._server = socket.create_server((_check_loopback(listen_host, "listen"), listen_port))
        self.port = self._server.getsockname()[1]
        self.address = f"{self._server.getsockname()[0]}:{self.port}"
        self._conns: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> LatencyProxy:
        """Begin accepting connections (in a daemon thread); returns self."""
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=10)
                up.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns += [client, up]
            _Pipe(client, up, self, self.stats["up"]).start()
            _Pipe(up, client, self, self.stats["down"]).start()

    def cut(self) -> None:
        """Reset every open connection, as a network that drops them mid-way; new
        connections are still accepted."""
        conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        """Stop listening and close every connection (idempotent)."""
        self._closed = True
        for s in [self._server, *self._conns]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    """Run a proxy from the command line until interrupted."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="loopback HOST:PORT to forward to")
    p.add_argument("--delay-ms", type=float, required=True, help="delay in each direction")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free)")
    args = p.parse_args(argv)
    try:
        proxy = LatencyProxy(args.upstream, args.delay_ms, listen_port=args.port).start()
    except (ValueError, OSError) as e:
        print(f"latency_proxy: error: {e}", file=sys.stderr)
        return 1
    print(proxy.address, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
