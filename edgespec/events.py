"""What the engine streams: one small frozen dataclass per token, round and finish."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class TokenKind(StrEnum):
    """Where a token came from."""

    ACCEPTED = "accepted"  # proposed by the drafter, kept by the target
    REJECTED = "rejected"  # proposed by the drafter, refused (not part of the output)
    CORRECTION = "correction"  # sampled by the target in place of a rejected draft token
    BONUS = "bonus"  # sampled by the target after every draft token was accepted
    PLAIN = "plain"  # sampled by the target in a round without a draft
    GRAMMAR = "grammar"  # drafted from the text a grammar forces, kept by the target
    FORCED = "forced"  # the only token the grammar admits: certain, no logits computed

    @property
    def from_target(self) -> bool:
        """True for tokens the target produced itself."""
        return self in (TokenKind.CORRECTION, TokenKind.BONUS, TokenKind.PLAIN)


class StopReason(StrEnum):
    """Why generation ended."""

    MAX_TOKENS = "max_tokens"
    EOG = "eog"  # an end-of-generation token
    STOP_STRING = "stop"
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"
    GRAMMAR = "grammar"  # the grammar admits no token (not even an end of generation)


class DraftRatios:
    """Ratios over a generation's counters, shared by Stats and the benchmark's records."""

    drafted: int
    accepted: int
    generated: int
    rounds: int
    target_calls: int

    @property
    def gamma_mean(self) -> float:
        """Draft tokens per round."""
        return self.drafted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted draft tokens (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_per_call(self) -> float:
        """Tokens produced per target verify call (accepted drafts + the target's own)."""
        return self.generated / self.target_calls if self.target_calls else 0.0


@dataclass(frozen=True)
class Stats(DraftRatios):
    """Running totals of one generation (cumulative in every RoundEvent)."""

    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    rounds: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    wall_s: float = 0.0
    position_tried: tuple[int, ...] = ()  # per draft position: times verified on its own merit
    position_accepted: tuple[int, ...] = ()  # ... and times accepted
    # a grammar's own drafts (not in drafted/accepted, which are the drafter's):
    grammar_drafted: int = 0  # tokens drafted from the text the grammar forces
    grammar_accepted: int = 0  # ... and kept
    forced: int = 0  # output tokens that were the grammar's only choice (rows not computed)

    @property
    def position_acceptance(self) -> list[float]:
        """P(draft token i accepted | tokens before it accepted), per position i."""
        return [
            h / t if t else 0.0
            for h, t in zip(self.position_accepted, self.position_tried, strict=True)
        ]

    @property
    def decode_s(self) -> float:
        """Wall time after the prompt was processed."""
        return max(self.wall_s - self.prompt_s, 0.0)

    @property
    def other_s(self) -> float:
        """Decode time spent neither drafting nor verifying (sampling glue, detokenizing)."""
        return max(self.decode_s - self.draft_s - self.verify_s, 0.0)

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of decode time (prompt processing excluded)."""
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, float | int]:
        """All fields and derived figures, for JSON output."""
        d: dict[str, float | int] = asdict(self)
        for name in (
            "gamma_mean",
            "position_acceptance",
            "acceptance_rate",
            "mean_accepted_per_call",
            "decode_s",
            "other_s",
            "tokens_per_second",
        ):
            d[name] = getattr(self, name)
        return d


@dataclass(frozen=True)
class TokenEvent:
    """One token: kept (accepted/correction/bonus/plain) or a rejected draft token."""

    kind: TokenKind
    token: int
    text: str
    round: int
    # with logprobs requested, kept tokens only: log of the token's probability under the
    # target's processed distribution p, and the likeliest (id, logprob), best first
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RoundEvent:
    """End of one draft-and-verify round."""

    round: int
    drafted: int
    accepted: int
    stats: Stats


@dataclass(frozen=True)
class DoneEvent:
    """Generation finished: the whole output and final statistics."""

    text: str
    tokens: tuple[int, ...]
    stop_reason: StopReason
    stats: Stats


Event = TokenEvent | RoundEvent | DoneEvent
