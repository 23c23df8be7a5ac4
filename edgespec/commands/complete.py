"""``edgespec complete``: the code completion at a cursor position in a file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..completion.fim import split_at_cursor
from ..completion.session import (
    AUTO,
    DEFAULT_MAX_LINES,
    CodeRules,
    CompletionRequest,
    CompletionResult,
    load_session,
)
from ..errors import InvalidParameterError
from ..params import check_whole
from .options import (
    AUTO_DRAFT_HELP,
    add_model_options,
    add_sampling_options,
    cli_type,
    load_options,
    sampling_from_args,
)

DEFAULT_COMPLETE_TOKENS = 128


def register(sub: argparse._SubParsersAction) -> None:
    """Add the complete subcommand."""
    p = sub.add_parser(
        "complete",
        help="complete code at a line and column of a file",
        description="Fill in the middle at --line/--col of --file (1-based, columns in "
        "characters) with the model's FIM tokens, or from the prefix alone when it has "
        "none. Stops at end of generation, a FIM end token, --max-lines lines, or where "
        "the completion starts repeating the code after the cursor.",
    )
    add_model_options(p, draft=AUTO, draft_help=AUTO_DRAFT_HELP)
    add_sampling_options(p)
    p.set_defaults(max_tokens=DEFAULT_COMPLETE_TOKENS)
    p.add_argument("--file", type=Path, required=True, help="the source file")
    p.add_argument("--line", type=int, required=True, help="cursor line (1-based)")
    p.add_argument("--col", type=int, required=True, help="cursor column (1-based)")
    p.add_argument(
        "--max-lines",
        type=cli_type(check_whole, name="max-lines"),
        default=DEFAULT_MAX_LINES,
        help=f"most lines to complete (default {DEFAULT_MAX_LINES}; 0: no limit)",
    )
    p.add_argument(
        "--min-indent",
        type=cli_type(check_whole, name="min-indent"),
        default=None,
        help="end before a line indented less than this (default: the cursor line's "
        "indentation, so a completion stays in its block; 0: no limit)",
    )
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the completion (streamed), or one JSON object with --json."""
    sampling = sampling_from_args(args)
    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidParameterError(f"cannot read {args.file}: {e}") from None
    prefix, suffix = split_at_cursor(text, args.line, args.col)
    session = load_session(args.target, args.draft, gamma=args.gamma, options=load_options(args))
    fp = session.fim_prompt(prefix, suffix, max_tokens=args.max_tokens)
    if not fp.fim:
        print(
            f"edgespec: {session.name} has no FIM tokens: completing from the prefix only",
            file=sys.stderr,
        )
    min_indent = args.min_indent
    if min_indent is None:
        line = prefix.rsplit("\n", 1)[-1] + suffix.split("\n", 1)[0]
        min_indent = len(line) - len(line.lstrip(" \t")) if line.strip() else len(line)
    rules = CodeRules(suffix, fp.prefix_at_line_start, args.max_lines or None, min_indent or None)
    req = CompletionRequest(
        fp.tokens, args.max_tokens, sampling, args.seed, tuple(args.stop), rules
    )
    result = None
    for item in session.run(req):
        if isinstance(item, CompletionResult):
            result = item
        elif not args.json:
            sys.stdout.write(item)
            sys.stdout.flush()
    assert result is not None
    s = result.stats
    if args.json:
        out = {
            "text": result.text,
            "stop_reason": result.stop,
            "fim": fp.fim,
            "truncated": fp.truncated,
            "prompt_tokens": len(fp.tokens),
            "target": str(session.target.path),
            "draft": session.drafter_name,
            "gamma": session.gamma,
            "stats": s.to_dict(),
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        print(
            f"[{len(result.tokens)} tokens, {s.tokens_per_second:.1f} tok/s, accepted "
            f"{s.accepted}/{s.drafted} drafts, stop: {result.stop}]",
            file=sys.stderr,
        )
    return 0
