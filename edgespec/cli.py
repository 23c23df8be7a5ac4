"""The ``edgespec`` command line.

Built-in subcommands live in ``edgespec/commands/``; other packages (the
terminal app in ``tui/``) add theirs through the ``edgespec.commands`` entry-point
group, so edgespec never imports them. Every failure edgespec anticipates ends
as one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import NoReturn

from .errors import EdgespecError, one_line

BUILTIN_COMMANDS = (
    "generate",
    "models",
    "pull",
    "rm",
    "calibrate",
    "bench",
    "complete",
    "serve",
    "worker",
    "quantize",
    "doctor",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgespec: error: {one_line(message)} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser: built-in subcommands, then plugged-in ones."""
    import importlib

    parser = _Parser(prog="edgespec", description="Exact speculative decoding for GGUF models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in BUILTIN_COMMANDS:
        importlib.import_module(f"edgespec.commands.{name}").register(sub)
    for ep in entry_points(group="edgespec.commands"):
        ep.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``edgespec`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # (a supervised server starts its child with these)
    try:
        return int(args.run(args) or 0)
    except EdgespecError as e:
        print(f"edgespec: error: {one_line(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("edgespec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `edgespec models | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
