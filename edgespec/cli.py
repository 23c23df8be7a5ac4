"""The ``edgespec`` command line: ``edgespec generate ...``.

Every failure edgespec anticipates ends as one line on stderr and a non-zero
exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from .errors import EdgespecError, InvalidParameterError

DEFAULT_TARGET = "gemma-3-270m"
DEFAULT_DRAFT = "none"
DEFAULT_PROMPT = "The three most useful things to know about the sea are"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgespec: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser (exposed for tests and docs)."""
    from .engine import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS
    from .sampling import DEFAULT_MIN_P, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P

    parser = _Parser(prog="edgespec", description="Exact speculative decoding for GGUF models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="generate text from a prompt")
    g.add_argument(
        "--target", default=DEFAULT_TARGET, help="target model: .gguf path or embedded name"
    )
    g.add_argument(
        "--draft", default=DEFAULT_DRAFT, help="draft model: .gguf path, embedded name, or none"
    )
    g.add_argument("--prompt", help="prompt text")
    g.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    g.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    g.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help="0 disables")
    g.add_argument("--top-p", type=float, default=DEFAULT_TOP_P)
    g.add_argument("--min-p", type=float, default=DEFAULT_MIN_P)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--gamma", type=int, default=DEFAULT_GAMMA, help="draft tokens per round")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--ctx", type=int, default=None, help="context length in tokens")
    g.add_argument("--gpu-layers", type=int, default=0, help="target layers to offload")
    g.add_argument("--draft-gpu-layers", type=int, default=0, help="draft layers to offload")
    g.add_argument("--plain", action="store_true", help="target only, no speculation")
    g.add_argument("--json", action="store_true", help="print one JSON object at the end")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``edgespec`` script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return _generate(args)
    except EdgespecError as e:
        print(f"edgespec: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("edgespec: interrupted", file=sys.stderr)
        return 130
    return 2


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None and args.prompt_file is not None:
        raise InvalidParameterError("give --prompt or --prompt-file, not both")
    if args.prompt_file is not None:
        try:
            return args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidParameterError(
                f"cannot read prompt file {args.prompt_file}: {e}"
            ) from None
    return args.prompt if args.prompt is not None else DEFAULT_PROMPT


def _generate(args: argparse.Namespace) -> int:
    from .engine import stream_generate
    from .events import DoneEvent, TokenEvent, TokenKind
    from .loading import load_pair
    from .sampling import SamplingParams

    sampling = SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p
    )
    if args.gamma < 0:
        raise InvalidParameterError(f"gamma must be >= 0, got {args.gamma}")
    if args.max_tokens < 0:
        raise InvalidParameterError(f"max-tokens must be >= 0, got {args.max_tokens}")
    prompt = _read_prompt(args)
    draft_spec = "none" if args.plain else args.draft
    target, drafter = load_pair(
        args.target,
        draft_spec,
        n_ctx=args.ctx,
        n_threads=args.threads,
        gpu_layers=args.gpu_layers,
        draft_gpu_layers=args.draft_gpu_layers,
    )
    done = None
    for ev in stream_generate(
        target,
        prompt,
        drafter=drafter,
        max_tokens=args.max_tokens,
        sampling=sampling,
        gamma=args.gamma if drafter else 0,
        seed=args.seed,
        stop=args.stop,
    ):
        if isinstance(ev, TokenEvent) and not args.json and ev.kind is not TokenKind.REJECTED:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    s = done.stats
    if args.json:
        out = {
            "text": done.text,
            "tokens": list(done.tokens),
            "stop_reason": done.stop_reason.value,
            "target": str(target.path),
            "draft": drafter.name if drafter else None,
            "gamma": args.gamma if drafter else 0,
            "stats": s.to_dict(),
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        print(
            f"[{s.generated} tokens, {s.tokens_per_second:.1f} tok/s, "
            f"accepted {s.accepted}/{s.drafted} drafts, "
            f"{s.mean_accepted_per_call:.2f} tokens per target call, "
            f"stop: {done.stop_reason.value}]",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
