"""``edgespec serve``: a local OpenAI- and llama.cpp-compatible completion server."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading
import time

from .. import context_overflow as overflow
from ..completion.history_file import DEFAULT_SAVE_INTERVAL_S, HistoryFile, check_history_path
from ..completion.session import AUTO, CompletionSession, load_session
from ..errors import InvalidParameterError
from ..params import DEFAULT_PARALLEL, check_parallel, check_whole
from .options import AUTO_DRAFT_HELP, add_model_options, load_options, parse_gamma

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def register(sub: argparse._SubParsersAction) -> None:
    """Add the serve subcommand."""
    from ..server import API_KEY_ENV, DEFAULT_MAX_BODY
    from ..server.slots import DEFAULT_MAX_QUEUE
    from ..server.supervisor import DEFAULT_RPC_RETRY

    p = sub.add_parser(
        "serve",
        help="serve completions over HTTP (OpenAI /v1 API and llama.cpp /infill)",
        description="Serve one target (and drafter) over HTTP: POST /v1/completions, "
        "/v1/chat/completions and /infill, GET /v1/models and /health, and llama-server's "
        "POST /completion, /tokenize and /detokenize, GET /props and /metrics (Prometheus). "
        "Up to --parallel requests generate at once, each speculating on its own sequence, "
        "their rounds verified in shared forward passes; a request takes the free slot "
        "whose KV cache shares the longest prefix with it.",
    )
    add_model_options(p, draft=AUTO, draft_help=AUTO_DRAFT_HELP, rpc=True)
    p.add_argument(
        "--gamma",
        type=parse_gamma,
        default=AUTO,
        help="draft tokens per round, or auto (adaptive)",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require this key on every route but /health (default: ${API_KEY_ENV})",
    )
    p.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        help=f"largest request body in bytes (default {DEFAULT_MAX_BODY})",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        help=f"requests generated at once, each with its own KV cache of --ctx tokens "
        f"(default {DEFAULT_PARALLEL}, llama-server's too: two chats and two editors)",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=DEFAULT_MAX_QUEUE,
        help=f"requests that may wait for a slot; more get 429 with Retry-After "
        f"(default {DEFAULT_MAX_QUEUE})",
    )
    p.add_argument(
        "--history-file",
        metavar="PATH",
        help="keep the n-gram lookup's history of earlier requests in this file: read at "
        f"start, saved every {DEFAULT_SAVE_INTERVAL_S:.0f} s while it changes and at exit, "
        "so a restarted server drafts from what it served before",
    )
    p.add_argument(
        "--rpc-retry",
        type=int,
        default=DEFAULT_RPC_RETRY,
        metavar="N",
        help="with --rpc, the models run in a child process that a lost worker ends: "
        "reload the target when the workers answer again, probing up to N times "
        f"(default {DEFAULT_RPC_RETRY}, about 5 minutes; 0: no child, and a lost worker "
        "leaves the server answering 503 until restarted)",
    )
    p.add_argument(
        "--supervise",
        action="store_true",
        help="run the models in a child process, started again when it crashes (an abort "
        "in llama.cpp, out of memory): the crash costs the requests on it, not the server, "
        "which answers 503 with Retry-After meanwhile (always so with --rpc; "
        "--rpc-retry bounds the restarts)",
    )
    p.add_argument(
        "--supervised",
        metavar="DIR",
        help="(set by the front of an --rpc server) run as its child: on a lost worker "
        "exit 75 after saving state in DIR",
    )
    p.add_argument(
        "--context-overflow",
        choices=overflow.MODES,
        default=overflow.ERROR,
        help=f"{overflow.HELP}; the response says so in usage and an "
        "X-Edgespec-Truncated-Messages header (chat only: a plain prompt over the context "
        f"is always refused; default {overflow.ERROR})",
    )
    p.add_argument("--name", help="model id clients use (default: the --target name)")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the models and serve until interrupted."""
    from ..server import EdgespecServer, serve
    from ..server.app import check_api_key

    check_api_key(args.api_key)  # before the models load
    if not 0 <= args.port <= 65535:
        raise InvalidParameterError(f"port must be 0..65535, got {args.port}")
    if args.max_body < 1:
        raise InvalidParameterError(f"max-body must be >= 1, got {args.max_body}")
    parallel = check_parallel(args.parallel)
    check_whole(args.max_queue, name="max-queue")
    check_whole(args.rpc_retry, name="rpc-retry")
    if args.history_file:
        check_history_path(args.history_file)
    if ((args.rpc and args.rpc_retry > 0) or args.supervise) and not args.supervised:
        return _run_front(args)
    session = load_session(
        args.target,
        args.draft,
        gamma=args.gamma,
        name=args.name,
        options=load_options(args).replace(parallel=parallel),
    )

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    history_path = args.history_file
    if history_path is None and args.supervised and session.history is not None:
        history_path = os.path.join(args.supervised, "lookup-history")  # kept across reloads
    keeper = _history_file(session, history_path) if history_path else None

    try:
        server = EdgespecServer(
            (args.host, args.port),
            session,
            api_key=args.api_key,
            max_body=args.max_body,
            log=log,
            max_queue=args.max_queue,
            after_loss=_end_after_loss(keeper) if args.supervised else None,
            context_overflow=args.context_overflow,
        )
    except OSError as e:
        raise InvalidParameterError(
            f"cannot listen on {args.host}:{args.port}: {e.strerror or e}"
        ) from None
    # the grammar tokenizer (seconds on a large vocabulary) is built beside the first
    # requests, not in the first constrained one (which waits for it if it comes first)
    threading.Thread(target=session.target.prepare_grammar, daemon=True).start()
    host, port = server.server_address[:2]
    fim = "fill-in-the-middle" if session.has_fim else "no FIM tokens: prefix-only completion"
    chat = "its chat template" if session.chat_template else "no chat template: ChatML fallback"
    print(
        f"edgespec: serving {session.name} (draft {session.drafter_name}, gamma {session.gamma}; "
        f"{parallel} slot{'s' if parallel > 1 else ''}; {fim}; {chat}) on http://{host}:{port}",
        file=sys.stderr,
        flush=True,
    )
    if (note := session.calibration_note) is not None:
        print(f"edgespec: gamma auto: {note}", file=sys.stderr, flush=True)
    _warn_if_open(args)
    # Ctrl+C (SIGINT) stops the server even when the parent left it blocked or
    # ignored (a signal mask and SIG_IGN are inherited across exec)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if keeper is not None:
        keeper.start()

        def save_then_terminate(signum: int, _frame: object) -> None:
            keeper.close()  # then end as SIGTERM always has, unhandled
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, save_then_terminate)
    serve(server)
    if keeper is not None:
        keeper.close()
    # Everything is closed and nothing is left to write (caches are replaced atomically
    # when written): end here rather than in the interpreter's finalization, which
    # frees the models from daemon threads' reach and once kept a stopped server alive
    # past a minute in the test suite.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _end_after_loss(keeper: HistoryFile | None):
    """The supervised child's end on a lost worker: the loss as its last line, then,
    once its requests have failed, the lookup history saved and EXIT_WORKER_LOST."""
    from ..server.supervisor import EXIT_WORKER_LOST

    def finish() -> None:
        time.sleep(0.5)  # the failed requests' handlers write their errors
        if keeper is not None:
            keeper.close()
        sys.stdout.flush()
        os._exit(EXIT_WORKER_LOST)

    def after_loss(message: str) -> None:
        print(f"edgespec: error: {message}", file=sys.stderr, flush=True)  # (the front's cue)
        threading.Thread(target=finish, daemon=True).start()

    return after_loss


def _run_front(args: argparse.Namespace) -> int:
    """Serve from a child process, restarted after a lost worker or a crash (see
    edgespec.server.supervisor); this process holds no model."""
    from ..server.proxy import ProxyServer
    from ..server.supervisor import Supervisor

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def first_ready(line: str) -> None:
        log(f"{line.rsplit(' on http://', 1)[0]} on http://{host}:{port}")
        _warn_if_open(args)

    argv = getattr(args, "argv", None) or sys.argv[1:]
    supervisor = Supervisor(argv, args.rpc or [], retries=args.rpc_retry, log=log,
                            on_first_ready=first_ready)  # fmt: skip
    try:
        front = ProxyServer(
            (args.host, args.port),
            supervisor,
            api_key=args.api_key,
            max_body=args.max_body,
            log=log,
        )
    except OSError as e:
        raise InvalidParameterError(
            f"cannot listen on {args.host}:{args.port}: {e.strerror or e}"
        ) from None
    host, port = front.server_address[:2]
    threading.Thread(target=front.serve_forever, daemon=True).start()

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=supervisor.stop, daemon=True).start()

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    rc = supervisor.run()
    supervisor.stop()
    front.shutdown()
    front.server_close()
    return rc


def _warn_if_open(args: argparse.Namespace) -> None:
    if not args.api_key and not _is_loopback(args.host):
        print(
            f"edgespec: warning: {args.host} is reachable from other machines and no API key "
            "is set (--api-key)",
            file=sys.stderr,
        )


def _history_file(session: CompletionSession, path: str) -> HistoryFile:
    """The session's lookup history, with what ``path`` saved added (one line on stderr)."""
    if session.history is None:
        raise InvalidParameterError(
            "--history-file needs the n-gram lookup (--draft auto, ngram or ngram+MODEL)"
        )
    keeper = HistoryFile(
        session.history, path, log=lambda msg: print(msg, file=sys.stderr, flush=True)
    )
    n = keeper.load()
    print(
        f"edgespec: lookup history: {n} earlier request{'' if n == 1 else 's'} from {path}"
        if n
        else f"edgespec: lookup history: none yet, saved to {path}",
        file=sys.stderr,
        flush=True,
    )
    return keeper


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
