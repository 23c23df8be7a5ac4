"""llama.cpp RPC workers: the target's layers on other machines' ggml-rpc servers.

llama.cpp spreads a model's layers over RPC workers (its ggml-rpc backend, what
`rpc-server` and `--rpc` use). The functions are reached as llama.cpp's own tools
reach them: the "RPC" backend registry of the ggml library llama_cpp loaded, and
its proc addresses. A device of a worker goes into llama_model_params.devices for
the target only; RPC devices are never registered globally, so a draft model
loaded with devices=NULL stays on this machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import BackendError
from .bindings import libggml, ll
from .kernels import default_threads
from .rpc_watch import timed_out

RPC_UNAVAILABLE = "this llama.cpp was built without RPC; rebuild with scripts/bootstrap.sh"
RPC_DEFAULT_PORT = 50052
RPC_PROBE_TIMEOUT = 5.0  # seconds to connect to a worker and get its HELLO answer
RECOVERY_PROBE_TIMEOUT_S = 2.0  # ... when waiting for a lost worker to return
_RPC_CMD_HELLO = 14  # ggml-rpc.cpp: "RPC_CMD_HELLO must be always 14"
_RPC_CONN_CAPS_SIZE = 24
_RPC_PROTO_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of ggml-rpc.h in llama-cpp-python 0.3.36
_GGML_DEV_CPU, _GGML_DEV_ACCEL = 0, 3

_ggml_lib = None
_rpc_endpoints: dict[str, list[int]] = {}  # endpoint -> its device pointers, once added
_abort_handler = None  # keeps the ctypes callback alive
_stay_up = False  # a lost worker parks the decoding thread instead of ending the process
_lost: str | None = None  # what was lost, once a worker has been
_loss_listeners: list[Callable[[str], None]] = []


def _ggml():
    """The ggml library llama_cpp loaded, with the registry functions declared."""
    global _ggml_lib
    if _ggml_lib is None:
        lib = libggml()
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, res, args in (
            ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_reg_dev_count", sz, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, sz]),
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_set_abort_callback", vp, [vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _ggml_lib = lib
    return _ggml_lib


def rpc_supported() -> bool:
    """True when this llama.cpp has the RPC backend (built with -DGGML_RPC=on)."""
    return bool(ll.llama_supports_rpc())


def _rpc_proc(name: str, restype, *argtypes):
    """A function of the RPC backend by its proc address (as llama.cpp's tools get it)."""
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise BackendError(RPC_UNAVAILABLE)
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:
        raise BackendError(f"{RPC_UNAVAILABLE} ({name} missing)")
    return ctypes.CFUNCTYPE(restype, *argtypes)(addr)


def parse_rpc_endpoints(text: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` (llama.cpp's --rpc) as a list of endpoints;
    ValueError with one line for a malformed one."""
    endpoints = []
    for part in text.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not HOST:PORT: {part!r} (--rpc takes HOST:PORT[,HOST:PORT...])")
        endpoints.append(f"{host}:{int(port)}")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"a worker is named twice in {text!r}")
    return endpoints


def probe_rpc_worker(endpoint: str, timeout: float = RPC_PROBE_TIMEOUT) -> tuple[int, int, int]:
    """Connect to a worker and say HELLO as ggml-rpc's client does; its protocol
    version. BackendError (one line) when it cannot be reached or does not answer.

    llama.cpp aborts the whole process on a worker it cannot connect to, so edgespec
    asks first. A worker serves one client at a time: one busy with another process
    accepts the connection but does not answer until that client leaves.
    """
    import socket
    import struct

    host, _, port = endpoint.rpartition(":")
    request = struct.pack("<BQ", _RPC_CMD_HELLO, _RPC_CONN_CAPS_SIZE) + bytes(_RPC_CONN_CAPS_SIZE)
    want = 4 + _RPC_CONN_CAPS_SIZE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(request)
            answer = b""
            while len(answer) < 8 + want:
                chunk = s.recv(8 + want - len(answer))
                if not chunk:
                    raise BackendError(
                        f"RPC worker {endpoint} closed the connection (not an edgespec or "
                        "llama.cpp RPC worker, or another protocol version?)"
                    )
                answer += chunk
    except TimeoutError:
        raise BackendError(
            f"RPC worker {endpoint} did not answer within {timeout:g} s "
            "(busy with another client, or not an RPC worker?)"
        ) from None
    except OSError as exc:
        raise BackendError(f"cannot reach RPC worker {endpoint}: {exc.strerror or exc}") from None
    (size,) = struct.unpack("<Q", answer[:8])
    major, minor, patch = answer[8], answer[9], answer[10]
    if size != want or major != _RPC_PROTO_MAJOR:
        raise BackendError(
            f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this llama.cpp "
            f"{_RPC_PROTO_MAJOR}.x: run the same llama.cpp build on both sides"
        )
    return major, minor, patch


def unanswering_rpc_workers(
    endpoints: Sequence[str], timeout: float = RECOVERY_PROBE_TIMEOUT_S
) -> list[tuple[str, str]]:
    """Those of the endpoints that do not answer a HELLO now, each with the one-line why."""
    failed = []
    for endpoint in endpoints:
        try:
            probe_rpc_worker(endpoint, timeout=timeout)
        except BackendError as exc:
            failed.append((endpoint, str(exc)))
    return failed


def stay_up_on_worker_loss() -> None:
    """In a long-running process (the server): when a worker dies, park the one thread
    that was decoding through it instead of ending the process.

    ggml-rpc aborts on a lost worker, from inside that thread's llama_decode, and
    nothing can be unwound from there; a thread that never returns can at least be
    left where it is. Every model on workers then refuses to decode or edit its cache
    (``RpcWorkerLost``), ``rpc_worker_lost`` says what happened, and the listeners
    registered with ``on_rpc_worker_lost`` are told once, so that whatever waited on
    the parked decode can fail instead of waiting. The parked model is never freed.
    """
    global _stay_up
    _stay_up = True


def on_rpc_worker_lost(listener: Callable[[str], None]) -> None:
    """Call listener(message) once a worker is lost (from the parked thread)."""
    _loss_listeners.append(listener)


def rpc_worker_lost() -> str | None:
    """The one-line message of a lost worker, or None while every worker is there."""
    return _lost


def _install_rpc_abort_handler() -> None:
    """Turn ggml-rpc's abort on a lost worker into one line on stderr and exit status 1,
    or, after ``stay_up_on_worker_loss``, into a parked thread (see there).

    ggml-rpc ends the process (GGML_ABORT) when a worker dies or answers nonsense;
    nothing can be unwound from there, so the message is made a clear one instead of
    an abort with a backtrace. Other aborts keep ggml's behaviour (message, abort).
    """
    global _abort_handler
    if _abort_handler is not None:
        return
    import sys

    @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
    def handler(message: bytes) -> None:
        global _lost
        text = " ".join((message or b"").decode("utf-8", "replace").split())
        text = re.sub(r"^\S+:\d+: ", "", text)  # ggml_abort's "file:line: "
        if not re.search(r"RPC|Failed to connect", text):
            os.write(2, f"{text}\n".encode())  # then ggml aborts, as without a handler
            return
        if (silent := timed_out()) is not None:  # cut off by the watchdog (rpc_watch)
            line = f"lost an RPC worker: {silent}"
        else:
            workers = ",".join(_unreachable(_rpc_endpoints) or _rpc_endpoints) or "?"
            line = f"lost an RPC worker ({workers}): {text}"
        if not _stay_up:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os.write(2, f"edgespec: error: {line}\n".encode())
            os._exit(1)
        first = _lost is None
        _lost = _lost or line
        if first:
            for listener in list(_loss_listeners):
                with contextlib.suppress(Exception):  # (a listener's bug must not abort)
                    listener(_lost)
        threading.Event().wait()  # parked for good: returning would let ggml abort

    _ggml().ggml_set_abort_callback(ctypes.cast(handler, ctypes.c_void_p))
    _abort_handler = handler


def _unreachable(endpoints: Sequence[str]) -> list[str]:
    """Those of the endpoints that refuse a connection now (a worker that died; a live
    one busy with this process still accepts, into its backlog)."""
    import socket

    dead = []
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=0.5).close()
        except OSError:
            dead.append(ep)
    return dead


def rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The devices of these workers, in order (each worker is asked first: see
    ``probe_rpc_worker``). Added once per process, as llama.cpp keeps one connection
    per worker."""
    add_server = _rpc_proc("ggml_backend_rpc_add_server", ctypes.c_void_p, ctypes.c_char_p)
    lib = _ggml()
    devices: list[int] = []
    for ep in endpoints:
        if ep not in _rpc_endpoints:
            probe_rpc_worker(ep)
            _install_rpc_abort_handler()
            reg = add_server(ep.encode())
            n = lib.ggml_backend_reg_dev_count(reg) if reg else 0
            if n == 0:
                raise BackendError(f"RPC worker {ep} has no devices")
            _rpc_endpoints[ep] = [lib.ggml_backend_reg_dev_get(reg, i) for i in range(n)]
        devices.extend(_rpc_endpoints[ep])
    return devices


@dataclass(frozen=True)
class DeviceInfo:
    """A ggml device: its name, description and memory in bytes."""

    name: str
    description: str
    free: int
    total: int


def device_info(dev: int) -> DeviceInfo:
    """Name, description and memory of a ggml device (an RPC worker's is asked over
    the network)."""
    lib = _ggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    name = (lib.ggml_backend_dev_name(dev) or b"").decode()
    desc = (lib.ggml_backend_dev_description(dev) or b"").decode()
    return DeviceInfo(name, desc, free.value, total.value)


def worker_devices() -> list[int]:
    """What llama.cpp's rpc-server serves: the accelerators (GPUs) if any, else the CPU."""
    lib = _ggml()
    devs = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    gpus = [d for d in devs if lib.ggml_backend_dev_type(d) not in (_GGML_DEV_CPU, _GGML_DEV_ACCEL)]
    return gpus or [lib.ggml_backend_dev_by_type(_GGML_DEV_CPU)]


def _check_can_listen(host: str, port: int) -> None:
    """BackendError (one line) unless host:port can be bound, as ggml-rpc binds it
    (SO_REUSEADDR); asked first, since ggml-rpc only prints a line and returns."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise BackendError(
                f"the RPC worker cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def run_rpc_worker(
    host: str,
    port: int,
    *,
    n_threads: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_ready: Callable[[list[DeviceInfo]], None] | None = None,
) -> None:
    """Serve llama.cpp's RPC protocol on host:port until interrupted (Ctrl+C), with
    edgespec's kernel settings (the environment set at the top of this module), one
    client at a time. BackendError (one line) when it cannot listen there.

    ``host`` must be a numeric IPv4 address (ggml-rpc binds with inet_addr); the
    caller decides which addresses are acceptable: the protocol has no
    authentication. ``on_ready(devices)`` is called with the DeviceInfo served,
    before listening.
    """
    import threading

    start = _rpc_proc(
        "ggml_backend_rpc_start_server",
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )
    devs = worker_devices()
    arr = (ctypes.c_void_p * len(devs))(*devs)
    threads = n_threads if n_threads and n_threads > 0 else default_threads()
    cache = str(cache_dir).encode() if cache_dir is not None else None
    endpoint = f"{host}:{port}"
    _check_can_listen(host, port)
    if on_ready is not None:
        on_ready([device_info(d) for d in devs])
    # ggml_backend_rpc_start_server never returns while it serves: run it on a thread
    # so that the main thread still sees Ctrl+C (and exits; the thread is a daemon).
    server = threading.Thread(
        target=start,
        args=(endpoint.encode(), cache, threads, len(devs), arr),
        name="edgespec-rpc-worker",
        daemon=True,
    )
    server.start()
    while server.is_alive():
        server.join(0.5)
    raise BackendError(
        f"the RPC worker could not listen on {endpoint} (port in use, or not an address "
        "of this machine?)"
    )
