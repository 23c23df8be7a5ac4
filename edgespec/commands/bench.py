"""``edgespec bench``: plain and speculative decoding on shipped workloads, side by side."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..backend import DEFAULT_CTX
from ..bench.load import MAX_LOAD, check_load
from ..errors import InvalidParameterError
from ..files import replace_file
from ..params import check_gamma, check_max_tokens
from .options import (
    CTX_HELP,
    DEFAULT_TARGET,
    RPC_HELP,
    THREADS_HELP,
    cli_type,
    cli_value,
    parse_ctx,
    parse_rpc,
)

if TYPE_CHECKING:
    from ..bench.runner import BenchSetup
    from ..bench.workloads import Workload

DEFAULT_DRAFTERS = "ngram"
DEFAULT_GAMMAS = "auto,1,2,4,8,16"
DEFAULT_LLAMA_LENGTHS = "1,2,4,8,16"
DEFAULT_REPS = 3
QUICK = {"reps": 1, "max_tokens": 48, "gammas": "auto,4", "llama_draft_lengths": "4"}
# what a saved report with missing keys or odd values raises while it is rendered
REPORT_ERRORS = (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError, IndexError)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the bench subcommand."""
    p = sub.add_parser(
        "bench",
        help="benchmark plain vs speculative decoding on shipped workloads",
        description="Run plain decoding and each speculative configuration on each workload "
        "in one process, alternating, with repetitions; print medians, speed-ups, acceptance, "
        "time split and peak RSS, and optionally write JSON and a PNG chart.",
    )
    p.add_argument("--target", default=DEFAULT_TARGET, help="target: .gguf path or model name")
    p.add_argument(
        "--drafters",
        default=DEFAULT_DRAFTERS,
        help="comma-separated drafters: ngram, a model path/name, ... (default: ngram)",
    )
    p.add_argument(
        "--workloads", default=None, help="comma-separated names or .toml files (default: all)"
    )
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        metavar="DIR",
        help="run every workload (*.toml) in DIR, as benchmarks/make_corpus.py writes it, or "
        "a corpus shipped with the bench (agent: agent turns), and report the distributions "
        "of the speed-ups per kind (instead of --workloads)",
    )
    p.add_argument(
        "--split",
        choices=("tuning", "validation", "all"),
        default="all",
        help="with --corpus: the half to run, by a hash of each name (default: all)",
    )
    p.add_argument(
        "--gammas", default=None, help=f"per drafter: auto and a fixed sweep ({DEFAULT_GAMMAS})"
    )
    p.add_argument("--reps", type=int, default=None, help=f"repetitions ({DEFAULT_REPS})")
    p.add_argument(
        "--max-tokens",
        type=cli_type(check_max_tokens, minimum=1),
        default=None,
        help="override each workload's",
    )
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--ctx", type=parse_ctx, default=DEFAULT_CTX, help=CTX_HELP)
    p.add_argument("--rpc", type=parse_rpc, default=None, metavar="HOST:PORT,...", help=RPC_HELP)
    p.add_argument(
        "--load",
        type=cli_type(check_load),
        default=0,
        metavar="N",
        help="run beside N busy processes (a loop on one core each, like `yes > /dev/null`) "
        f"that the bench starts and kills at the end: speed-ups on a busy machine; the "
        f"report records it (0 to {MAX_LOAD}; default 0)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the full report here")
    p.add_argument("--chart", type=Path, default=None, help="write a PNG chart here")
    p.add_argument(
        "--llama-cpp-bin",
        type=Path,
        default=None,
        help="folder with llama.cpp's llama-lookup / llama-speculative-simple to compare with",
    )
    p.add_argument(
        "--llama-draft-lengths",
        default=None,
        help=f"draft lengths for llama-lookup and llama-speculative-simple "
        f"({DEFAULT_LLAMA_LENGTHS}; none: do not run them)",
    )
    p.add_argument(
        "--llama-server-types",
        default=None,
        metavar="TYPES",
        help="with a llama-server in --llama-cpp-bin: its --spec-type values to run, none "
        "being its plain decoding (default: none,ngram-simple,ngram-map-k,ngram-map-k4v,"
        "ngram-mod; also ngram-cache)",
    )
    p.add_argument(
        "--llama-swa",
        choices=("full", "window"),
        default="window",
        help="llama.cpp's sliding-window cache: its default window-sized one, as edgespec's"
        " (default), or full-size",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="do not run: print the tables (and draw --chart) from a saved --json report",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 rep, 48 tokens, gammas auto,4 (explicit options still win); "
        "one repetition judges no goal",
    )
    p.set_defaults(run=run)


def _ints(text: str, what: str) -> list[int]:
    """Comma-separated whole numbers >= 1, each once (in the order first given): a
    repeated value would be one configuration label run twice per repetition."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(f"{what} must be comma-separated whole numbers") from None
    if not vals or min(vals) < 1:
        raise InvalidParameterError(f"{what} must be whole numbers >= 1")
    return list(dict.fromkeys(vals))


def _gammas(text: str) -> list[int | str]:
    out: list[int | str] = []
    for item in (s.strip() for s in text.split(",")):
        g = check_gamma(cli_value(item), minimum=1)  # plain decoding runs anyway
        if g not in out:
            out.append(g)
    return out


def _server_types(text: str | None) -> list[str]:
    from ..bench.llamaserver import DEFAULT_TYPES, parse_types

    if text is None:
        return [*DEFAULT_TYPES]
    try:
        return parse_types(text)
    except ValueError as e:
        raise InvalidParameterError(f"--llama-server-types: {e}") from None


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print the tables; write JSON and the chart if asked."""
    from ..bench.corpus import load_corpus
    from ..bench.report import finish, text_report
    from ..bench.runner import BenchSetup
    from ..bench.workloads import select_workloads, shipped_corpus

    if args.from_json is not None:
        return _rerender(args.from_json, args.chart)
    quick = QUICK if args.quick else {}
    reps = args.reps if args.reps is not None else quick.get("reps", DEFAULT_REPS)
    max_tokens = args.max_tokens if args.max_tokens is not None else quick.get("max_tokens")
    if reps < 1:
        raise InvalidParameterError(f"reps must be >= 1, got {reps}")
    gammas = _gammas(args.gammas or quick.get("gammas", DEFAULT_GAMMAS))
    lengths_text = args.llama_draft_lengths or quick.get(
        "llama_draft_lengths", DEFAULT_LLAMA_LENGTHS
    )
    lengths = [] if lengths_text == "none" else _ints(lengths_text, "llama draft lengths")
    server_types = _server_types(args.llama_server_types)
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    if args.llama_cpp_bin is not None:
        from ..bench.llamacpp import LOOKUP, SPECULATIVE, find_binaries
        from ..bench.llamaserver import SERVER, find_server

        if not args.llama_cpp_bin.is_dir():
            raise InvalidParameterError(f"--llama-cpp-bin: no such folder {args.llama_cpp_bin}")
        # else the run would silently lack them
        if not find_binaries(args.llama_cpp_bin) and find_server(args.llama_cpp_bin) is None:
            raise InvalidParameterError(
                f"--llama-cpp-bin: no executable {LOOKUP}, {SPECULATIVE} or {SERVER} in "
                f"{args.llama_cpp_bin}"
            )
    if args.corpus is not None and args.workloads is not None:
        raise InvalidParameterError("give --corpus or --workloads, not both")
    if args.corpus is not None:
        if not args.corpus.exists() and (shipped := shipped_corpus(str(args.corpus))):
            args.corpus = shipped  # a corpus shipped with the bench, by name
        workloads = load_corpus(args.corpus, args.split)
    else:
        workloads = select_workloads(args.workloads)
    for option, path in (("--json", args.json), ("--chart", args.chart)):
        if path is not None:
            _check_writable(path, option)
    setup = BenchSetup(
        target=args.target,
        drafters=drafters,
        workloads=workloads,
        gammas=gammas,
        reps=reps,
        max_tokens=max_tokens,
        threads=args.threads,
        n_ctx=args.ctx,
        llama_cpp_bin=args.llama_cpp_bin,
        llama_draft_lengths=lengths,
        llama_swa_full=args.llama_swa == "full",
        llama_server_types=server_types,
        rpc=args.rpc,
    )
    report = _report(setup, workloads, args.load)
    if args.corpus is not None:  # and the distributions over the corpus (report.finish)
        report = finish({**report, "corpus": {"dir": str(args.corpus), "split": args.split}})
    print(text_report(report))
    if args.json is not None:
        text = json.dumps(report, indent=1)
        _write_output(args.json, "--json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if args.chart is not None:
        _write_chart(report, args.chart)
    return 0


def _rerender(saved: Path, chart: Path | None) -> int:
    """Print the tables of a saved report and redraw its chart."""
    from ..bench.report import finish, text_report

    if chart is not None:
        _check_writable(chart, "--chart")
    try:
        data = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidParameterError(f"cannot read report {saved}: {e}") from None
    try:  # nothing is printed or written until the whole report has been read
        report = finish(data)
        text = text_report(report)
        if chart is not None:
            _write_chart(report, chart)
    except REPORT_ERRORS as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise InvalidParameterError(f"cannot read report {saved}: {detail}") from None
    print(text)
    return 0


def _write_chart(report: dict, path: Path) -> None:
    from ..bench.chart import write_chart

    _write_output(path, "--chart", lambda tmp: write_chart(report, tmp))


def _check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written before the run, not after it."""
    if path.is_dir():
        raise InvalidParameterError(f"{option}: {path} is a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}."):
            pass
    except OSError as e:
        where = path.parent
        raise InvalidParameterError(f"{option}: cannot write in {where}: {e.strerror}") from None


def _write_output(path: Path, option: str, write: Callable[[Path], object]) -> None:
    """Write through a temporary file and rename it: never a half-written report."""
    try:
        replace_file(path, write)
    except OSError as e:
        raise InvalidParameterError(f"{option}: cannot write {path}: {e.strerror}") from None


def _report(setup: BenchSetup, workloads: list[Workload], load: int = 0) -> dict:
    """Run the benchmark (beside ``load`` busy processes) and build its report, with what
    reproduces it."""
    import resource
    import shlex

    from ..backend import SWA_RING
    from ..bench.load import BusyLoad
    from ..bench.report import build_report
    from ..bench.runner import run_bench
    from ..version import __version__

    with BusyLoad(load) as busy:
        if load:
            print(f"beside {load} busy process{'es' if load != 1 else ''}", file=sys.stderr)
        records, info = run_bench(setup)
    argv = sys.argv[1:]
    meta = {
        "edgespec_version": __version__,
        # llama.cpp with edgespec's ring patch: a window-sized sliding-window cache (else
        # the full-size one, which costs more at depth)
        "llama_cpp_swa_ring": SWA_RING,
        "command": shlex.join(["edgespec", *argv]) if argv[:1] == ["bench"] else None,
        "reps": setup.reps,
        "max_tokens": setup.max_tokens,
        "gammas": setup.gammas,
        "process_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": busy.describe(),
    }
    return build_report(records, info, workloads, meta)
