"""``edgespec generate``: one prompt in, text (or one JSON object) out."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..backend import LlamaModel
from ..chat_template import ChatFormat
from ..errors import InvalidParameterError
from ..events import DoneEvent, TokenEvent, TokenKind
from ..loading import load_pair
from ..policy.gap_calibration import calibration_note, calibration_progress
from ..speculation.loop import stream_generate
from .options import add_model_options, add_sampling_options, load_options, sampling_from_args

DEFAULT_PROMPT = "The three most useful things to know about the sea are"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the generate subcommand."""
    p = sub.add_parser(
        "generate",
        help="generate text from a prompt",
        description="Continue --prompt (or --prompt-file) with the target, speculatively "
        "with --draft, and stream the text to stdout (figures on stderr), or print one JSON "
        "object with --json. With --chat the prompt is one user message in the target's "
        "chat template, so an instruct model answers it; without, the model continues the "
        "text as it is (what a base model such as the default gemma-3-270m does).",
    )
    add_model_options(p, rpc=True)
    add_sampling_options(p)
    p.add_argument("--prompt", help=f"prompt text (default: {DEFAULT_PROMPT!r})")
    p.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument(
        "--chat",
        action="store_true",
        help="send the prompt as a user message in the target's chat template (instruct "
        "models, e.g. smollm2-135m-instruct), so the model answers it",
    )
    p.add_argument("--plain", action="store_true", help="target only, no speculation")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(run=run)


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


def _chat_prompt(target: LlamaModel, prompt: str) -> str:
    """``prompt`` as the one user message of a conversation in the target's template."""
    template = target.chat_template()
    if not template:
        raise InvalidParameterError(
            f"--chat: {target.path.name} has no chat template (a base model: drop --chat "
            "and it continues the prompt)"
        )
    return ChatFormat.of(target, template).render([{"role": "user", "content": prompt}])


def run(args: argparse.Namespace) -> int:
    """Run generate; stream text to stdout, or print one JSON object with --json."""
    sampling = sampling_from_args(args)
    prompt = _read_prompt(args)
    target, drafter = load_pair(
        args.target, "none" if args.plain else args.draft, load_options(args)
    )
    if args.chat:
        prompt = _chat_prompt(target, prompt)
    gamma = args.gamma if drafter else 0
    auto = drafter is not None and gamma == "auto"
    note = calibration_note(target) if auto else None  # said once the prompt is accepted
    done, shown = None, ""
    for ev in stream_generate(
        target,
        prompt,
        drafter=drafter,
        max_tokens=args.max_tokens,
        sampling=sampling,
        gamma=gamma,
        seed=args.seed,
        stop=args.stop,
    ):
        if note is not None:
            print(f"edgespec: gamma auto: {note}", file=sys.stderr, flush=True)
            note = None
        if isinstance(ev, TokenEvent) and ev.kind is not TokenKind.REJECTED:
            shown += ev.text
            if not args.json:
                sys.stdout.write(ev.text)
                sys.stdout.flush()
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    if auto and (note := calibration_progress(target)) is not None:
        print(f"edgespec: gamma auto: {note}", file=sys.stderr, flush=True)
    if not args.json:  # held back (a possible stop string) or flushed at the end
        sys.stdout.write(done.text[len(shown) :])
    s = done.stats
    if args.json:
        out = {
            "text": done.text,
            "tokens": list(done.tokens),
            "stop_reason": done.stop_reason.value,
            "target": str(target.path),
            "draft": drafter.name if drafter else None,
            "drafter": drafter.name if drafter else "none",
            "gamma": gamma,
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
