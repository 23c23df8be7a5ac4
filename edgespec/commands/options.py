"""Option groups that several subcommands share, and turning them into objects."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from ..backend import (
    DEFAULT_CTX,
    DEFAULT_RPC_TIMEOUT_S,
    check_rpc_timeout,
    default_threads,
    parse_rpc_endpoints,
)
from ..drafting.build import AUTO
from ..errors import InvalidParameterError
from ..loading import LoadOptions
from ..params import check_gamma, check_max_tokens, check_seed, check_whole
from ..sampling import (
    DEFAULT_MIN_P,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    SamplingParams,
)
from ..speculation.loop import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS

DEFAULT_TARGET = "gemma-3-270m"  # base model: completion and code
DEFAULT_CHAT_TARGET = "smollm2-135m-instruct"  # the embedded model with a chat template
# auto, the n-gram prompt lookup: no second vocabulary-compatible model installs offline
DEFAULT_DRAFT = AUTO

T = TypeVar("T")

#: llama.cpp pads every context to a multiple of 256 tokens: a smaller --ctx would
#: silently become 256, so it is refused instead.
MIN_CTX = 256
MAX_CTX = 1 << 24  # 16,777,216 tokens: above every GGUF's training context


DRAFT_HELP = (
    "draft: auto (the default) or ngram, n-gram prompt lookup, which --gamma auto turns "
    "off where it does not pay; a .gguf path or model name (any vocabulary); "
    "ngram+MODEL (n-gram, else the model); or none"
)
AUTO_DRAFT_HELP = DRAFT_HELP  # every command's --draft means the same


THREADS_HELP = f"CPU threads (default, or 0: one per available core, {default_threads()} here)"
CTX_HELP = (
    f"context length in tokens (default {DEFAULT_CTX}; a model may allow more, e.g. "
    f"gemma-3-270m 32768 and smollm2-135m-instruct 8192, at more memory; at least "
    f"{MIN_CTX}, rounded up to a multiple of {MIN_CTX} by llama.cpp)"
)


def add_model_options(
    p: argparse.ArgumentParser,
    *,
    target: str = DEFAULT_TARGET,
    draft: str = DEFAULT_DRAFT,
    draft_help: str = DRAFT_HELP,
    rpc: bool = False,
) -> None:
    """--target/--draft and how to run them (threads, context, GPU layers; with rpc,
    --rpc: the target's layers on llama.cpp RPC workers): ``load_options`` turns them
    into a LoadOptions."""
    p.add_argument("--target", default=target, help=f"target: .gguf path or model name ({target})")
    p.add_argument("--draft", default=draft, help=draft_help)
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--ctx", type=parse_ctx, default=None, help=CTX_HELP)
    p.add_argument("--gpu-layers", type=int, default=0, help="target layers to offload")
    p.add_argument("--draft-gpu-layers", type=int, default=0, help="draft layers to offload")
    if rpc:
        p.add_argument(
            "--rpc", type=parse_rpc, default=None, metavar="HOST:PORT,...", help=RPC_HELP
        )
        p.add_argument(
            "--rpc-timeout",
            type=parse_rpc_timeout,
            default=DEFAULT_RPC_TIMEOUT_S,
            metavar="SECONDS",
            help="seconds a decode may wait on the RPC workers before they count as lost "
            "(default: %(default)g; llama.cpp itself waits for ever)",
        )


def load_options(args: argparse.Namespace) -> LoadOptions:
    """The LoadOptions that add_model_options' flags set (with its rpc, --rpc and
    --rpc-timeout too): one object for every command, the library's own."""
    options = LoadOptions(
        n_ctx=args.ctx,
        n_threads=args.threads,
        gpu_layers=args.gpu_layers,
        draft_gpu_layers=args.draft_gpu_layers,
    )
    if hasattr(args, "rpc"):
        options = options.replace(rpc=tuple(args.rpc or ()), rpc_timeout=args.rpc_timeout)
    return options


RPC_HELP = (
    "place the target's layers on these RPC workers (edgespec worker, or llama.cpp's "
    "rpc-server), split by their memory; with --gpu-layers N only N layers go there, the "
    "rest stay local; the draft stays local"
)


def parse_rpc(text: str) -> list[str]:
    """An argparse ``type=`` for --rpc: HOST:PORT[,HOST:PORT...]."""
    try:
        return parse_rpc_endpoints(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_rpc_timeout(text: str) -> float:
    """An argparse ``type=`` for --rpc-timeout: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    try:
        return check_rpc_timeout(seconds)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """Sampling and speculation knobs."""
    p.add_argument(
        "--max-tokens",
        type=parse_max_tokens,
        default=DEFAULT_MAX_TOKENS,
        help="most tokens to generate (default: %(default)s; it also stops at end of "
        "generation or a full context)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=DEFAULT_TEMPERATURE,
        help="0 = greedy (default %(default)s)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        help="keep the k likeliest tokens (default %(default)s; 0 disables)",
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=DEFAULT_TOP_P,
        help="nucleus: keep the likeliest tokens up to this mass (default %(default)s)",
    )
    p.add_argument(
        "--min-p",
        type=float,
        default=DEFAULT_MIN_P,
        help="drop tokens below this fraction of the top one's probability (default %(default)s)",
    )
    p.add_argument("--seed", type=parse_seed, default=None, help="makes sampling repeatable")
    p.add_argument(
        "--gamma",
        type=parse_gamma,
        default=DEFAULT_GAMMA,
        help="draft tokens per round, or auto (the default): chosen each round from measured costs",
    )


def cli_type(check: Callable[..., T], **limits: Any) -> Callable[[str], T]:
    """An argparse ``type=`` built on a validator of edgespec.params.

    The option's text is checked as a whole number where it is one (else as it
    is, e.g. "auto"); a refusal is argparse's one-line usage error, in the
    validator's words.
    """

    def parse(text: str) -> T:
        try:
            return check(cli_value(text), **limits)
        except InvalidParameterError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


def cli_value(text: str) -> int | str:
    """An option's text as an int when it is a whole number, else the text itself."""
    try:
        return int(text)
    except ValueError:
        return text


def check_ctx(value: int | str) -> int:
    """A --ctx value: a whole number of tokens, at least llama.cpp's smallest context and
    at most MAX_CTX (the backend caps it further at the model's training length)."""
    return check_whole(value, name="ctx", minimum=MIN_CTX, maximum=MAX_CTX)


parse_ctx = cli_type(check_ctx)
parse_seed = cli_type(check_seed)
parse_gamma = cli_type(check_gamma)
parse_max_tokens = cli_type(check_max_tokens)


def sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    """SamplingParams from parsed options (validates them)."""
    return SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p
    )
