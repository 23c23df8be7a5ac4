"""The checks of generation parameters that several front ends share, with one wording each.

The library (engine, completion session), the CLI's option types
(``edgespec.commands.options``) and the server's request parsing all call these,
so a value is refused by the same rule, in the same words, wherever it comes in.
Each raises InvalidParameterError; ``name`` is how the caller spells the field
(the CLI's ``max-tokens``, the server's ``'max_tokens'``).
"""

from __future__ import annotations

import operator

from .errors import InvalidParameterError

AUTO = "auto"


def _whole(value: object) -> int | None:
    """value as an int when it is a whole number (an int or numpy integer, not a bool)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[call-overload]
    except TypeError:
        return None


def check_whole(value: object, *, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """value, when it is a whole number >= minimum (and <= maximum, where one is given)."""
    n = _whole(value)
    if n is None or n < minimum:
        raise InvalidParameterError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if maximum is not None and n > maximum:
        raise InvalidParameterError(f"{name} must be at most {maximum:,}, got {value!r}")
    return n


def check_max_tokens(value: object, *, minimum: int = 0, name: str = "max-tokens") -> int:
    """A token budget: a whole number >= minimum (the bench wants >= 1)."""
    return check_whole(value, name=name, minimum=minimum)


def check_seed(value: object, *, name: str = "seed") -> int:
    """A sampling seed: a whole number >= 0 (numpy's generators take no negative seed)."""
    return check_whole(value, name=name, minimum=0)


def check_gamma(value: object, *, minimum: int = 0, name: str = "gamma") -> int | str:
    """Draft tokens per round: "auto", or a whole number >= minimum (the bench's fixed
    gammas are >= 1, since it runs plain decoding anyway)."""
    if value == AUTO:
        return AUTO
    n = _whole(value)
    if n is None or n < minimum:
        raise InvalidParameterError(
            f"{name} must be auto or a whole number >= {minimum}, got {value!r}"
        )
    return n


#: Sequences a server generates on at once by default: llama-server's default too;
#: two chats and two editors' completions each get a slot.
DEFAULT_PARALLEL = 4
MAX_PARALLEL = 64  # (edgespec.backend.model.MAX_SEQ)


def check_parallel(value: object, *, name: str = "parallel") -> int:
    """Slots of a server: a whole number from 1 to MAX_PARALLEL."""
    return check_whole(value, name=name, minimum=1, maximum=MAX_PARALLEL)
