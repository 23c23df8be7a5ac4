"""The shared start of two token sequences: prefix reuse in the KV cache, slot choice
in the server, and the lookup history all measure it the same way."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class ReusesPrefix:
    """``reuse_prefix`` for anything with a token list it can truncate
    (a model's own sequence, or one sequence of a shared context)."""

    tokens: list[int]
    tiled_at: bytearray  # 1 where the tiled kernel computed the position (a prompt's)
    redecodes: int

    def truncate(self, n: int) -> None:  # pragma: no cover (each class has its own)
        """Keep the first n tokens of the cache, drop the rest."""
        raise NotImplementedError

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest common prefix of the cache and ``tokens``; return its length.

        At least one token is left to decode, since the caller needs its logits.
        """
        n = common_prefix(self.tokens, tokens[: len(tokens) - 1])  # one left to decode
        self.truncate(n)
        return n

    def rebuild(self, n: int, start: int) -> None:
        """After a rollback to n the cache could not keep: decode the first n tokens
        again, from ``start`` (a checkpoint restored the first ``start``) or, at 0,
        from an emptied cache. Each position on the kernel that first computed it
        (``tiled_at``), so its cells come back bit for bit."""
        keep, tiled = self.tokens[:n], bytes(self.tiled_at[:n])
        if start:
            del self.tokens[start:], self.tiled_at[start:]
        else:
            self.reset()
            self.redecodes += 1
        while start < n:  # runs of one kernel
            end = start + 1
            while end < n and tiled[end] == tiled[start]:
                end += 1
            self.decode(keep[start:end], logits="none", tiled=bool(tiled[start]))
            start = end

    def reset(self) -> None:  # pragma: no cover (each class has its own)
        """Empty the cache."""
        raise NotImplementedError

    def decode(  # pragma: no cover (each class has its own)
        self, tokens: Sequence[int], *, logits: str | Sequence[int] = "last",
        tiled: bool | None = None,
    ) -> object:  # fmt: skip
        """Append tokens to the cache."""
        raise NotImplementedError
