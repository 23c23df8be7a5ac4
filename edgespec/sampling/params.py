"""Sampling parameters: how logits become a next-token choice, checked once when made."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError

DEFAULT_TEMPERATURE = 0.0
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
DEFAULT_PENALTY_LAST_N = 64  # llama.cpp's default


@dataclass(frozen=True)
class SamplingParams:
    """How to turn logits into a next-token choice. temperature 0 means greedy."""

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P
    repeat_penalty: float = 1.0  # 1 disables it
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = DEFAULT_PENALTY_LAST_N  # tokens looked back at; 0 off, -1 all

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidParameterError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidParameterError(f"top-k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidParameterError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p < 1.0):
            raise InvalidParameterError(f"min-p must be in [0, 1), got {self.min_p}")
        rp = self.repeat_penalty
        with np.errstate(over="ignore", divide="ignore"):  # llama.cpp checks it as a float
            rp32 = np.float32(rp) if math.isfinite(rp) else np.float32("nan")
            if not (rp32 > 0 and np.isfinite(np.float32(1.0) / rp32)):
                raise InvalidParameterError(f"repeat penalty must be finite and > 0, got {rp}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not math.isfinite(getattr(self, name)):
                label = name.replace("_", " ")
                raise InvalidParameterError(f"{label} must be finite, got {getattr(self, name)}")
        n = self.penalty_last_n
        if isinstance(n, bool) or not isinstance(n, int) or n < -1:
            raise InvalidParameterError(f"penalty last-n must be >= -1 (-1: all), got {n}")

    @property
    def penalized(self) -> bool:
        """True when repetition penalties change logits (llama.cpp's is_disabled, negated)."""
        return self.penalty_last_n != 0 and (
            self.repeat_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0.0
