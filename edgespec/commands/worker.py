"""``edgespec worker``: a llama.cpp RPC worker (what llama.cpp's ``rpc-server`` does).

A target loaded with ``--rpc HOST:PORT,...`` places its layers on such workers. The
worker runs in this process with edgespec's kernel settings (``edgespec.backend``),
so that verification stays batch-invariant on the worker too. The RPC protocol has
no authentication: the worker binds loopback unless told, unsafely, otherwise.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

from ..backend import RPC_DEFAULT_PORT, DeviceInfo, default_threads, run_rpc_worker
from ..errors import InvalidParameterError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the worker subcommand."""
    p = sub.add_parser(
        "worker",
        help="serve this machine to a target loaded with --rpc (llama.cpp RPC worker)",
        description="Run a llama.cpp RPC worker: a target loaded elsewhere with "
        "--rpc HOST:PORT places layers on it. The protocol has no authentication and "
        "lets a client run arbitrary computations on this machine: the worker binds "
        "127.0.0.1 unless --unsafe-expose is given.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument(
        "--port", type=_port, default=RPC_DEFAULT_PORT, help="port (default %(default)s)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help=f"CPU threads (default, or 0: one per available core, {default_threads()} here)",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        help="keep the tensors clients send in this directory, so that a model "
        "loaded again is not sent again (llama.cpp's rpc-server --cache)",
    )
    p.add_argument(
        "--unsafe-expose",
        action="store_true",
        help="allow binding an address other than loopback: anyone who can reach it "
        "can use this machine, with no authentication",
    )
    p.set_defaults(run=run)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"not a port number (1-65535): {text!r}")
    return int(text)


def bind_address(host: str, *, unsafe_expose: bool) -> str:
    """The IPv4 address to bind for ``host``; loopback unless unsafe_expose.

    ggml-rpc binds a numeric IPv4 address only; "localhost" is 127.0.0.1.
    """
    addr = "127.0.0.1" if host == "localhost" else host
    try:
        ip = ipaddress.IPv4Address(addr)
    except ValueError:
        raise InvalidParameterError(
            f"--host must be an IPv4 address (the RPC backend binds no names or IPv6): {host!r}"
        ) from None
    if not ip.is_loopback and not unsafe_expose:
        raise InvalidParameterError(
            f"refusing to bind {host}: the RPC protocol has no authentication, so anyone "
            "who reaches it can use this machine; bind 127.0.0.1 (and tunnel), or pass "
            "--unsafe-expose on a network you trust"
        )
    return addr


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    host = bind_address(args.host, unsafe_expose=args.unsafe_expose)
    cache_dir = None
    if args.cache_dir is not None:
        cache_dir = Path(args.cache_dir).expanduser()
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot create --cache-dir {cache_dir}: {exc.strerror or exc}"
            ) from None

    def ready(devices: list[DeviceInfo]) -> None:
        served = ", ".join(f"{d.name} ({d.total >> 20} MiB)" for d in devices)
        print(f"edgespec: RPC worker on {host}:{args.port}, serving {served}", file=sys.stderr)
        if not ipaddress.IPv4Address(host).is_loopback:
            print(
                f"edgespec: warning: {host} is not loopback and the protocol has no "
                "authentication: anyone who can reach this port can use this machine",
                file=sys.stderr,
            )
        sys.stderr.flush()

    run_rpc_worker(host, args.port, n_threads=args.threads, cache_dir=cache_dir, on_ready=ready)
    return 0
