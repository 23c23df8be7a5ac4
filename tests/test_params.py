"""The shared parameter checks: one rule and one wording each, for the library, CLI and server."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from edgespec.commands.options import cli_type, cli_value, parse_gamma, parse_max_tokens, parse_seed
from edgespec.errors import InvalidParameterError
from edgespec.params import check_gamma, check_max_tokens, check_seed, check_whole


@pytest.mark.parametrize("value", [0, 1, 7, np.int64(3)])
def test_whole_numbers_pass_as_ints(value: object) -> None:
    got = check_whole(value, name="n")
    assert got == value and type(got) is int


@pytest.mark.parametrize("value", [-1, True, False, 2.0, 2.5, "3", None, [1]])
def test_anything_else_is_refused_in_one_wording(value: object) -> None:
    with pytest.raises(InvalidParameterError) as e:
        check_whole(value, name="n")
    assert str(e.value) == f"n must be a whole number >= 0, got {value!r}"


def test_max_tokens() -> None:
    assert check_max_tokens(0) == 0 and check_max_tokens(5) == 5
    assert check_max_tokens(-1, minimum=-1) == -1  # llama.cpp's n_predict: -1 = no limit
    with pytest.raises(
        InvalidParameterError, match=r"^max-tokens must be a whole number >= 0, got -1$"
    ):
        check_max_tokens(-1)
    # the bench's stricter rule is the same check with another minimum
    with pytest.raises(
        InvalidParameterError, match=r"^max-tokens must be a whole number >= 1, got 0$"
    ):
        check_max_tokens(0, minimum=1)
    with pytest.raises(InvalidParameterError, match=r"^'max_tokens' must be a whole number >= 0"):
        check_max_tokens(2.5, name="'max_tokens'")


def test_gamma() -> None:
    assert check_gamma("auto") == "auto"
    assert check_gamma(0) == 0 and check_gamma(4) == 4
    for bad in (-1, "AUTO", "4", 1.5, True):
        with pytest.raises(InvalidParameterError) as e:
            check_gamma(bad)
        assert str(e.value) == f"gamma must be auto or a whole number >= 0, got {bad!r}"
    assert check_gamma("auto", minimum=1) == "auto"
    with pytest.raises(
        InvalidParameterError, match=r"^gamma must be auto or a whole number >= 1, got 0$"
    ):
        check_gamma(0, minimum=1)


def test_seed() -> None:
    assert check_seed(0) == 0 and check_seed(2**40) == 2**40
    with pytest.raises(InvalidParameterError, match=r"^seed must be a whole number >= 0, got -1$"):
        check_seed(-1)


def test_cli_types_use_the_same_checks() -> None:
    assert cli_value("12") == 12 and cli_value("auto") == "auto" and cli_value("1.5") == "1.5"
    assert parse_gamma("auto") == "auto" and parse_gamma("3") == 3
    assert parse_max_tokens("0") == 0 and parse_seed("9") == 9
    cases = [
        (parse_gamma, "-2", "gamma must be auto or a whole number >= 0, got -2"),
        (parse_gamma, "x", "gamma must be auto or a whole number >= 0, got 'x'"),
        (parse_max_tokens, "many", "max-tokens must be a whole number >= 0, got 'many'"),
        (parse_seed, "-1", "seed must be a whole number >= 0, got -1"),
        (cli_type(check_max_tokens, minimum=1), "0", "max-tokens must be a whole number >= 1"),
        (cli_type(check_whole, name="max-lines"), "-1", "max-lines must be a whole number >= 0"),
    ]
    for parse, text, message in cases:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(text)


def test_ctx_has_a_ceiling() -> None:
    """--ctx 999999999999 was accepted (and silently capped): it is now refused in one line."""
    from edgespec.commands.options import MAX_CTX, MIN_CTX, parse_ctx

    assert parse_ctx(str(MIN_CTX)) == MIN_CTX and parse_ctx(str(MAX_CTX)) == MAX_CTX
    for text in ("999999999999", str(MAX_CTX + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match=r"^ctx must be at most 16,777,216"):
            parse_ctx(text)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^ctx must be a whole number >= 256"):
        parse_ctx("255")
