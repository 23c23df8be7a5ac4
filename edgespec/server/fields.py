"""Typed, range-checked access to a JSON body's fields: every check's refusal is a 400."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import InvalidParameterError
from ..params import check_whole
from .errors import ApiError, bad_request

MAX_STOP_STRINGS = 16

T = TypeVar("T")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 error."""

    def no_constants(name: str) -> None:
        raise ValueError(f"{name} is not valid JSON")

    try:
        data = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    return data


class Fields:
    """Typed, range-checked access to a JSON object's fields (null counts as absent)."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def _bad(self, name: str, what: str) -> ApiError:
        return bad_request(
            f"'{self.prefix}{name}' {what}", param=self.prefix + name, code="invalid_value"
        )

    def raw(self, name: str) -> Any:
        """The value as sent (None when absent or null)."""
        return self.data.get(name)

    def checked(self, name: str, default: T, check: Callable[..., T], **limits: Any) -> T:
        """A field checked by a validator of edgespec.params (its refusal is the 400)."""
        v = self.data.get(name)
        if v is None:
            return default
        try:
            return check(v, name=f"'{self.prefix}{name}'", **limits)
        except InvalidParameterError as e:
            raise bad_request(str(e), param=self.prefix + name, code="invalid_value") from None

    def integer(self, name: str, default: int | None, *, minimum: int | None = None) -> int | None:
        """An integer field (booleans and floats refused), at least minimum when given."""
        if minimum is not None:
            return self.checked(name, default, check_whole, minimum=minimum)
        v = self.data.get(name)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(name, "must be an integer")
        return v

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        open_min: bool = False,
        open_max: bool = False,
    ) -> float:
        """A finite number in the given range."""
        v = self.data.get(name)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self._bad(name, "must be a number")
        try:
            v = float(v)
        except OverflowError:
            raise self._bad(name, "is out of range") from None
        if not math.isfinite(v):
            raise self._bad(name, "must be finite")
        low = minimum is not None and (v <= minimum if open_min else v < minimum)
        high = maximum is not None and (v >= maximum if open_max else v > maximum)
        if low or high:
            lo = "(" if open_min else "["
            hi = ")" if open_max else "]"
            raise self._bad(name, f"must be in {lo}{minimum}, {maximum}{hi}, got {v}")
        return v

    def boolean(self, name: str, default: bool) -> bool:
        """A true/false field."""
        v = self.data.get(name)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(name, "must be a boolean")
        return v

    def string(self, name: str, default: str | None) -> str | None:
        """A string field."""
        v = self.data.get(name)
        if v is None:
            return default
        return self.text(v, name)

    def text(self, v: Any, name: str) -> str:
        """``v`` checked to be a string of valid Unicode (no lone surrogates)."""
        if not isinstance(v, str):
            raise self._bad(name, "must be a string")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise self._bad(name, "is not valid Unicode") from None
        return v

    def stop(self) -> tuple[str, ...]:
        """``stop``: a string or a list of strings."""
        v = self.data.get("stop")
        if v is None:
            return ()
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or len(items) > MAX_STOP_STRINGS:
            raise self._bad("stop", f"must be a string or a list of at most {MAX_STOP_STRINGS}")
        return tuple(s for s in (self.text(s, "stop") for s in items) if s)
