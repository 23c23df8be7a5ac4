"""``edgespec chat``: registered through the ``edgespec.commands`` entry-point group."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from functools import partial

from edgespec import (
    DEFAULT_CHAT_TARGET,
    EdgespecError,
    add_model_options,
    add_sampling_options,
    load_options,
    one_line,
    parse_draft_spec,
    resolve_model,
)

from .overflow import TRUNCATE_MIDDLE
from .session import GenerationSettings, LlamaChatEngine, ModelChoice


def register(sub: argparse._SubParsersAction) -> None:
    """Add the chat subcommand."""
    p = sub.add_parser(
        "chat",
        help="chat in the terminal and watch speculative decoding token by token",
        description="Open the terminal chat app on --target (a model with a chat template "
        "chats; a base model continues your text) with --draft, streaming each reply with "
        "every token coloured by where it came from and the acceptance figures beside it. "
        "F2/F3 step gamma, F4 the temperature, F5 the drafter, F6 shows rejected drafts.",
    )
    add_model_options(p, target=DEFAULT_CHAT_TARGET, rpc=True)
    add_sampling_options(p)
    p.add_argument(
        "--show-rejected",
        action="store_true",
        help="keep rejected draft tokens visible (F6 toggles it in the app)",
    )
    p.add_argument(
        "--context-overflow",
        choices=(TRUNCATE_MIDDLE, "error"),
        default=TRUNCATE_MIDDLE,
        help="a chat longer than --ctx: 'truncate-middle' (the default) leaves its oldest "
        "turns out of the prompt, as few as let it fit with room for the reply, and says so "
        "in the conversation; 'error' stops there with a message",
    )
    p.add_argument(
        "--resume",
        metavar="ID",
        help="reopen saved conversation ID (as Ctrl+O does); if it ends with your message, "
        "its reply is generated once the models are loaded",
    )
    p.add_argument(
        "--lookup-history-from",
        metavar="PATH",
        help="(set by chat's restart after a lost RPC worker) add the n-gram lookup history "
        "saved in PATH, then delete the file",
    )
    p.set_defaults(run=run)


def restart_argv(
    args: Sequence[str], conversation_id: str, history: str | None = None
) -> list[str]:
    """The command line that starts ``edgespec chat ARGS`` again resuming conversation_id
    (none for "") with the lookup history saved at history: any --resume and
    --lookup-history-from in ARGS are replaced."""
    replaced = ("--resume", "--lookup-history-from")
    kept: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in replaced:
            skip = True
        elif not a.startswith(tuple(f"{r}=" for r in replaced)):
            kept.append(a)
    if conversation_id:
        kept += ["--resume", conversation_id]
    if history:
        kept += ["--lookup-history-from", history]
    return [sys.executable, "-m", "edgespec", *kept]


def load_engine(choice: ModelChoice, history_from: str | None = None) -> LlamaChatEngine:
    """Load the pair; with history_from, add the lookup history saved there (a restart's)
    and delete the file. A history that cannot be read is left out: it only speeds up."""
    engine = LlamaChatEngine.load(choice)
    if history_from:
        with contextlib.suppress(OSError, ValueError):
            engine.history.load(history_from)
        with contextlib.suppress(OSError):
            os.unlink(history_from)
    return engine


def settings_from_args(args: argparse.Namespace) -> GenerationSettings:
    """GenerationSettings from the parsed options (InvalidParameterError when out of range).

    gamma, max-tokens and seed were checked by their option types while parsing;
    temperature, top-k, top-p and min-p are checked as SamplingParams are.
    """
    return GenerationSettings(
        gamma=args.gamma,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        max_tokens=args.max_tokens,
        seed=args.seed,
        context_overflow=args.context_overflow,
    )


def run(args: argparse.Namespace) -> int:
    """Open the app; returns its exit status (0 after Ctrl+Q)."""
    from .app import make_app
    from .store import ConversationStore

    settings = settings_from_args(args)
    store = ConversationStore()
    resume = None
    if args.resume is not None:
        what = f"cannot resume conversation {one_line(args.resume)}"
        try:
            resume = store.load(args.resume)
        except FileNotFoundError:
            raise EdgespecError(f"{what}: none is saved in {store.dir}") from None
        except (OSError, ValueError) as e:
            raise EdgespecError(f"{what}: {one_line(str(e))}") from None
    options = load_options(args)  # the same model options as every other command
    choice = ModelChoice(target=args.target, draft=args.draft, **asdict(options))
    # Fetch named models before the app takes the terminal, so download progress
    # shows as plain lines; any error is left for the app to show as a notification.
    for spec in (choice.target, parse_draft_spec(choice.draft).model):
        if spec is not None:
            with contextlib.suppress(EdgespecError):
                resolve_model(spec)
    app = make_app(
        partial(load_engine, choice, args.lookup_history_from),
        settings=settings,
        show_rejected=args.show_rejected,
        store=store,
        rpc=choice.rpc,
        resume=resume,
    )
    app.run()
    if app.restart_with is not None:  # Ctrl+R after the workers came back
        print("edgespec: the RPC workers answer again: starting again", file=sys.stderr)
        sys.stderr.flush()
        argv = restart_argv(sys.argv[1:], app.restart_with, app.restart_history)
        os.execv(sys.executable, argv)
    if app.worker_lost:  # a thread is parked inside llama.cpp for good: do not join it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(app.return_code or 0)
    return app.return_code or 0
