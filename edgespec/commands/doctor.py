"""``edgespec doctor``: what speculation does on this machine and build, and why."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..params import check_gamma, check_max_tokens
from .options import (
    CTX_HELP,
    DEFAULT_TARGET,
    THREADS_HELP,
    cli_type,
    load_options,
    parse_ctx,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the doctor subcommand."""
    from ..diagnosis.run import DEFAULT_BUDGET_S, DEFAULT_MAX_TOKENS, DEFAULT_REPS

    p = sub.add_parser(
        "doctor",
        help="check this machine and build: exactness, costs, which drafter pays",
        description="In about a minute, for a target and one or more drafters: the backend "
        "and devices, the kernel mode and patch, a greedy exactness self-test (speculative "
        "== plain, with rejections), the verify-cost curve (memory- or compute-bound), each "
        "drafter's acceptance and draft cost on your prompts, the speed-up Leviathan et "
        "al.'s formula predicts from them next to the measured one, and a recommendation "
        "(--draft, --gamma) with its reason. Exit status 1 if the exactness test fails.",
    )
    p.add_argument(
        "--target",
        default=DEFAULT_TARGET,
        help=f"target: .gguf path or model name ({DEFAULT_TARGET})",
    )
    p.add_argument(
        "--draft",
        action="append",
        default=None,
        help="a drafter to check (repeat to compare several): ngram, a .gguf path or model "
        "name (any vocabulary), ngram+MODEL (default: ngram)",
    )
    p.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSON lines, each with a 'prompt' string or a 'messages' list (default: three "
        "of the bench's shipped workloads); the first 8 are used",
    )
    p.add_argument(
        "--history-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="measure on the requests a server saved with serve --history-file (each "
        "without its last --max-tokens tokens, about where its output began)",
    )
    p.add_argument(
        "--max-tokens",
        type=cli_type(check_max_tokens, minimum=2),
        default=DEFAULT_MAX_TOKENS,
        help="tokens generated per prompt and run (default %(default)s)",
    )
    p.add_argument(
        "--gamma",
        type=cli_type(check_gamma, minimum=1),
        default=None,
        help="measure every drafter at this draft length (default: the one a short probe's "
        "acceptance predicts best)",
    )
    p.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help="most repetitions (default %(default)s)"
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="no repetition starts past about this many seconds (default %(default)g; at "
        "least one always runs)",
    )
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--ctx", type=parse_ctx, default=None, help=CTX_HELP)
    p.add_argument("--gpu-layers", type=int, default=0, help="target layers to offload")
    p.add_argument("--draft-gpu-layers", type=int, default=0, help="draft layers to offload")
    p.add_argument("--json", action="store_true", help="print the whole report as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the checks; print the report; 1 if greedy speculative output differed from plain."""
    from ..diagnosis import doctor
    from ..errors import InvalidParameterError

    if args.prompts is not None and args.history_file is not None:
        raise InvalidParameterError("give --prompts or --history-file, not both")
    report = doctor(
        args.target,
        args.draft or ["ngram"],
        prompts_file=args.prompts,
        history_file=args.history_file,
        max_tokens=args.max_tokens,
        gamma=args.gamma,
        reps=args.reps,
        budget_s=args.budget_s,
        options=load_options(args),
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps(report.to_dict()) if args.json else report.text())
    if not report.ok:
        print(
            "edgespec: error: exactness self-test failed: greedy speculative output differed "
            f"from plain ({report.exactness.mismatches[0]})",
            file=sys.stderr,
        )
        return 1
    return 0
