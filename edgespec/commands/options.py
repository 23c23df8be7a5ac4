"""Option groups that several subcommands share, and turning them into objects."""

from __future__ import annotations

import argparse

from ..engine import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS
from ..sampling import (
    DEFAULT_MIN_P,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    SamplingParams,
)

DEFAULT_TARGET = "gemma-3-270m"  # base model: completion and code
DEFAULT_CHAT_TARGET = "smollm2-135m-instruct"  # the embedded model with a chat template
DEFAULT_DRAFT = "ngram"  # no second vocabulary-compatible model installs offline


DRAFT_HELP = (
    "draft: .gguf path or model name (any vocabulary), ngram (prompt lookup), "
    "ngram+MODEL (n-gram, else the model), or none"
)
# the completion commands (complete, serve) default to auto
AUTO_DRAFT_HELP = (
    "draft: auto (the default: n-gram prompt lookup with adaptive gamma), "
    "ngram, none, or a .gguf path or model name"
)


def add_model_options(
    p: argparse.ArgumentParser,
    *,
    target: str = DEFAULT_TARGET,
    draft: str = DEFAULT_DRAFT,
    draft_help: str = DRAFT_HELP,
) -> None:
    """--target/--draft and how to run them (threads, context, GPU layers)."""
    p.add_argument("--target", default=target, help=f"target: .gguf path or model name ({target})")
    p.add_argument("--draft", default=draft, help=draft_help)
    p.add_argument(
        "--threads", type=int, default=None, help="CPU threads (0: all cores, the default)"
    )
    p.add_argument("--ctx", type=int, default=None, help="context length in tokens")
    p.add_argument("--gpu-layers", type=int, default=0, help="target layers to offload")
    p.add_argument("--draft-gpu-layers", type=int, default=0, help="draft layers to offload")


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """Sampling and speculation knobs."""
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help="0 disables")
    p.add_argument("--top-p", type=float, default=DEFAULT_TOP_P)
    p.add_argument("--min-p", type=float, default=DEFAULT_MIN_P)
    p.add_argument("--seed", type=parse_seed, default=None, help="makes sampling repeatable")
    p.add_argument(
        "--gamma",
        type=parse_gamma,
        default=DEFAULT_GAMMA,
        help="draft tokens per round, or auto: chosen each round from measured costs",
    )


def parse_seed(text: str) -> int:
    """A whole number >= 0 (numpy's generators take no negative seed)."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"seed must be a whole number >= 0, got {text!r}")
    return seed


def parse_gamma(text: str) -> int | str:
    """``auto`` or a whole number (range-checked later, with edgespec's own message)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"gamma must be a whole number or auto, got {text!r}"
        ) from None


def sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    """SamplingParams from parsed options (validates them)."""
    return SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p
    )
