"""``edgespec chat`` is plugged into the CLI through the entry point, with the shared options."""

from __future__ import annotations

import pytest
from edgespec_tui.command import run, settings_from_args

from edgespec.cli import build_parser
from edgespec.errors import InvalidParameterError


def test_chat_subcommand_and_settings() -> None:
    args = build_parser().parse_args(
        ["chat", "--gamma", "auto", "--temperature", "0.7", "--max-tokens", "32"]
    )
    assert args.run is run
    s = settings_from_args(args)
    assert (s.gamma, s.temperature, s.max_tokens) == ("auto", 0.7, 32)
    assert settings_from_args(build_parser().parse_args(["chat", "--gamma", "2"])).gamma == 2


@pytest.mark.parametrize("argv", [["chat", "--temperature", "-1"], ["chat", "--top-p", "0"]])
def test_bad_settings_are_one_line_errors(argv: list[str]) -> None:
    with pytest.raises(InvalidParameterError):
        settings_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chat", "--gamma", "-1"], "gamma must be auto or a whole number >= 0, got -1"),
        (["chat", "--max-tokens", "-1"], "max-tokens must be a whole number >= 0, got -1"),
    ],
)
def test_bad_counts_are_refused_while_parsing(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("edgespec: error: ") and message in err
