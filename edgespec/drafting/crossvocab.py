"""Drafting with a model whose vocabulary differs from the target's, through text.

The target's context is spelled out as text and tokenized with the draft's
tokenizer; the draft continues it; its continuation is spelled out and
tokenized with the target's tokenizer, and the target tokens that extend the
context are proposed. The target verifies them as usual, so greedy output is
the target's own, and a sampled proposal is reported as a point mass (q(x) = 1):
accepting x with probability p(x) and otherwise resampling from
norm(max(0, p - delta_x)) = p without x outputs exactly p whatever the law of x.

When sampling, the default is token-level intersection instead (``edgespec/tli.py``):
the draft samples only tokens that are also target tokens, with their restricted
distribution as q, which accepts more (min(1, p/q) instead of p(x)). Once that
token map exists, a segment (below) whose target tokens all have draft twins is
handed to the draft token for token rather than re-tokenized.

Token boundaries: only the end of the context is re-tokenized, from the start of
its last word (a *segment*, see below), so a round costs a few short tokenizer
calls rather than re-tokenizing the whole context. Tokens are proposed only
after a token boundary of the re-tokenized text that falls exactly at the end of
the context's text (a merge across the boundary proposes nothing), and the last
target token is held back until more draft text follows it, since it may be
part of a longer word.

Segments: the context's target tokens are cut before each token that starts a
word (its text starts with a space, or a newline when no tokenizer here adds a
space prefix), around special tokens, and after at most ``SEGMENT_MAX`` tokens.
Each finished segment is tokenized for the draft once; the last one is redone
every round. The draft's KV cache keeps the longest common prefix with the
resulting draft context, as ``ModelDrafter``'s does.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams, TokenDist, greedy_tokens, process_logits
from ..sampling.context_processing import Shaper
from .base import Draft, KeepDrafting, top_probability
from .tli import TokenMap, propose_shared

#: A segment (draft-side tokenization unit) holds at most this many target tokens.
SEGMENT_MAX = 64
#: Draft tokens per round, at most, per target token asked for (plus one).
DEFAULT_DRAFT_RATIO = 1.5


def complete_text(data: bytes) -> str:
    """``data`` as text up to its last complete UTF-8 character (bad bytes become U+FFFD)."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


class Codec:
    """Token ids to bytes and text to token ids for one model, with cached pieces.

    ``space_prefix`` is True for tokenizers that put a space before the text
    (SentencePiece with add_space_prefix): ``encode`` then drops one leading
    space of its own, so the tokens spell the text exactly.
    """

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._pieces: dict[int, bytes] = {}
        self._control: dict[int, bool] = {}
        probe = model.tokenize("a", add_special=False)
        self.space_prefix = bool(probe) and model.token_bytes(probe[0]).startswith(b" ")
        info = model.vocab_info()
        self.bos: int | None = info.bos if info.add_bos else None

    def piece(self, token: int) -> bytes:
        """The bytes of a token; a special token is spelled out (``<start_of_turn>``)."""
        b = self._pieces.get(token)
        if b is None:
            b = self._pieces[token] = self.model.token_bytes(token, special=True)
        return b

    def is_control(self, token: int) -> bool:
        """True for special tokens, which have text only when spelled out."""
        c = self._control.get(token)
        if c is None:
            c = self._control[token] = bool(self.piece(token)) and not self.model.token_bytes(token)
        return c

    def encode(self, text: str) -> list[int]:
        """Tokens of ``text`` as a piece of running text: no BOS, special token texts parsed."""
        if self.space_prefix and text.startswith(" "):
            text = text[1:]
        return self.model.tokenize(text, add_special=False, parse_special=True)


@dataclass(frozen=True)
class _Segment:
    """Target tokens context[start:end] and their draft tokens."""

    start: int
    end: int
    draft: list[int]


class CrossVocabDrafter:
    """A draft model with its own vocabulary, translated to the target's through text.

    Args:
        target: the target model (only its tokenizer is used, never its cache).
        draft: the draft model; its KV cache follows the translated context.
        name: shown in stats and the CLI (default: the file name + " (cross-vocab)").
        draft_ratio: at most ``ceil(draft_ratio * n) + 1`` draft tokens per round
            that asks for n target tokens (text path).
        tli: True: always token-level intersection (the token map is built now);
            False: always through text; None: intersection when sampling, text when
            greedy (the map is built on the first sampled proposal).
    """

    is_lookup = False

    def __init__(
        self,
        target: LlamaModel,
        draft: LlamaModel,
        *,
        name: str | None = None,
        draft_ratio: float = DEFAULT_DRAFT_RATIO,
        tli: bool | None = None,
    ) -> None:
        self.target = target
        self.model = draft
        self.name = name or f"{draft.path.name} (cross-vocab)"
        self.draft_ratio = draft_ratio
        self.tli = tli
        self._tmap = TokenMap(target, draft) if tli else None
        self._t = Codec(target)
        self._d = Codec(draft)
        # a word starts a segment; newlines too unless a space prefix would be added
        no_prefix = not (self._t.space_prefix or self._d.space_prefix)
        self._starters = (b" ", b"\n", b"\t") if no_prefix else (b" ",)
        self._ctx: list[int] = []
        self._closed: list[_Segment] = []
        self._closed_draft: list[int] = [] if self._d.bos is None else [self._d.bos]

    # --- Drafter protocol ---------------------------------------------------

    def bind(self, target: LlamaModel) -> None:
        """Nothing to learn of the target (the draft model is its own)."""

    def prefill(self, context: Sequence[int]) -> None:
        """Bring the draft cache up to the translated context, less its last token."""
        dctx, _ = self._translate_context(context)
        m = self.model
        if not dctx or len(dctx) > m.n_ctx:
            return
        cached = m.reuse_prefix(dctx)
        if len(dctx) - 1 > cached:
            m.decode(dctx[cached:-1], logits="none")

    def propose(
        self,
        context: Sequence[int],
        n: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        *,
        keep: KeepDrafting | None = None,
        shape: Shaper | None = None,  # unused: see Drafter.propose
    ) -> Draft:
        """Up to n target tokens: the draft's continuation of the context, re-tokenized.

        With ``keep``, a target token is kept while keep(i, p) agrees, p being the
        draft's probability of the text it has written so far.
        """
        if n <= 0 or not context:
            return Draft([], [])
        dctx, window = self._translate_context(context)
        use_tli = self.tli if self.tli is not None else not sampling.greedy
        if use_tli:
            return propose_shared(self.model, self.token_map, dctx, n, sampling, rng, keep)
        m = self.model
        budget = min(math.ceil(self.draft_ratio * n) + 1, m.n_ctx - len(dctx))
        if not dctx or budget <= 0:
            return Draft([], [])
        cached = m.reuse_prefix(dctx)
        logits = m.decode(dctx[cached:], logits="last")
        calls = 1
        text = bytearray()
        tokens: list[int] = []
        confidence = 1.0  # the draft's probability of its text so far
        for i in range(budget):
            if sampling.greedy:
                x = int(greedy_tokens(logits)[0])
                if keep is not None:
                    confidence *= top_probability(logits[0])
            else:
                dist = process_logits(logits, sampling)[0]
                x = dist.sample(rng)
                confidence *= dist.prob(x)
            eog = m.is_eog(x)
            if eog or self._d.is_control(x):
                if eog:  # the text ends here: its last target token is complete
                    tokens = self.to_target(window, bytes(text), final=True)
                break
            text += self._d.piece(x)
            tokens = self.to_target(window, bytes(text))
            if len(tokens) >= n or (keep and _kept(tokens, keep, confidence) < len(tokens)):
                break
            if i + 1 < budget:
                logits = m.decode([x], logits="last")
                calls += 1
        tokens = tokens[:n]
        if keep is not None:
            tokens = tokens[: _kept(tokens, keep, confidence)]
        # a proposal drawn from the draft's sampler, reported as a point mass: exact
        q = [] if sampling.greedy else [TokenDist(np.array([t]), np.array([1.0])) for t in tokens]
        return Draft(tokens, q, calls)

    @property
    def token_map(self) -> TokenMap:
        """The tokens both vocabularies share (built on first use)."""
        if self._tmap is None:
            self._tmap = TokenMap(self.target, self.model)
        return self._tmap

    # --- translation ----------------------------------------------------------

    def to_target(self, window: bytes, text: bytes, *, final: bool = False) -> list[int]:
        """Target tokens that spell ``text`` after a context whose text ends in ``window``.

        ``window`` is the text of the context's last target tokens, from a word
        start. window + text is re-tokenized; the tokens after the boundary at
        len(window) are returned, less the last one unless ``final``. Nothing is
        returned when no token boundary falls there (a token spans it) or the
        re-tokenized text does not spell window + text.
        """
        head = complete_text(window)
        full = complete_text(head.encode() + text)
        spelled = full.encode()
        if not spelled.startswith(window) or len(spelled) == len(window):
            return []
        t = self._t
        tokens = t.encode(full)
        pieces = [t.piece(x) for x in tokens]
        got = b"".join(pieces)
        if got == spelled:
            shift = 0
        elif t.space_prefix and got == b" " + spelled:
            shift = 1  # the tokenizer's own space before text that starts mid-line
        else:
            return []
        end, start = -shift, None
        if not window:
            start = 0
        for i, p in enumerate(pieces):
            end += len(p)
            if end == len(window):
                start = i + 1
            elif end > len(window):
                break
        if start is None:
            return []
        return tokens[start:] if final else tokens[start:-1]

    def _translate_context(self, context: Sequence[int]) -> tuple[list[int], bytes]:
        """The draft tokens of the context's text, and the text of its last segment."""
        common = 0
        limit = min(len(self._ctx), len(context))
        while common < limit and self._ctx[common] == context[common]:
            common += 1
        # a segment ends where the next token starts a word: that token must be common too
        while self._closed and self._closed[-1].end >= common:
            seg = self._closed.pop()
            del self._closed_draft[len(self._closed_draft) - len(seg.draft) :]
        self._ctx = list(context)
        if self._closed:
            start = self._closed[-1].end
        else:
            start = 1 if context and self._t.bos is not None and context[0] == self._t.bos else 0
        t = self._t
        for i in range(start + 1, len(context)):
            prev, tok = context[i - 1], context[i]
            if (
                t.piece(tok)[:1] in self._starters
                or t.is_control(tok)
                or t.is_control(prev)
                or i - start >= SEGMENT_MAX
            ):
                data = b"".join(t.piece(x) for x in context[start:i])
                text = data.decode("utf-8", "replace")
                seg = _Segment(start, i, self._encode_segment(context[start:i], text))
                self._closed.append(seg)
                self._closed_draft.extend(seg.draft)
                start = i
        window = b"".join(t.piece(x) for x in context[start:])
        last = self._encode_segment(context[start:], complete_text(window))
        return [*self._closed_draft, *last], window

    def _encode_segment(self, tokens: Sequence[int], text: str) -> list[int]:
        """Draft tokens for a segment: target ``tokens`` whose text is ``text``."""
        twins = self._tmap.twins(tokens) if self._tmap is not None else None
        return twins if twins is not None else self._d.encode(text)


def _kept(tokens: list[int], keep: KeepDrafting, confidence: float) -> int:
    """How many leading tokens keep() agrees to verify, at the draft's confidence."""
    k = 0
    while k < len(tokens) and keep(k + 1, confidence):
        k += 1
    return k
