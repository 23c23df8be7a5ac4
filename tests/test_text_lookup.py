"""The lookup by text: the word being written, found at the start of an earlier word,
continued as the tokenizer splits what followed it there."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.drafting.ngram import NgramDrafter
from edgespec.drafting.text_lookup import TextLookup
from edgespec.sampling import SamplingParams

# a toy vocabulary: the prompt's words carry their space, the output's split otherwise
VOCAB = [" lives", " in", " Uppsala", " (", "email", " bruno", ".", "lind", "@", "example",
         "se", ")", "\n", '"', "city", '":', ' "', "U", "ppsala", "pps", "ala", "br", "uno",
         "ex", "Upp", "sala", " ", *"abcdefghijklmnopqrstuvwxyz"]  # fmt: skip
IDS = {t: i for i, t in enumerate(VOCAB)}


def _bytes(token: int) -> bytes:
    return VOCAB[token].encode()


def _tokenize(text: str) -> list[int]:
    """Longest match first, as a stand-in for a real tokenizer."""
    out, at = [], 0
    while at < len(text):
        piece = max((t for t in VOCAB if text.startswith(t, at)), key=len)
        out.append(IDS[piece])
        at += len(piece)
    return out


def _ids(*pieces: str) -> list[int]:
    return [IDS[p] for p in pieces]


PROMPT = _ids(" lives", " in", " Uppsala", " (", "email", " bruno", ".", "lind", "@", "example",
              ".", "se", ")", "\n")  # fmt: skip


def test_the_word_being_written_continues_its_earlier_occurrence() -> None:
    look = TextLookup(_bytes, _tokenize)
    context = [*PROMPT, *_ids('"', "city", '":', ' "', "U")]
    # "U" starts " Uppsala": what followed, "ppsala (email bruno.lind@example.se)",
    # tokenized anew, up to the line's end
    tokens, spanned = look.lookup(context, 20)
    assert tokens == _tokenize("ppsala (email bruno.lind@example.se)")
    assert tokens[:2] == _ids("ppsala", " (") and spanned == 1
    # cut at a length (about 6 bytes a token): its last token, which may merge on, left out
    tokens, _ = look.lookup(context, 2)
    assert tokens == _ids("ppsala", " (")
    assert _tokenize("ppsala (email brun")[-1] == IDS["n"]  # (what was left out)


def test_a_word_split_over_tokens_and_a_line_end() -> None:
    look = TextLookup(_bytes, _tokenize)
    context = [*PROMPT, *_ids('"', "br", "uno", ".", "lind")]
    tokens, spanned = look.lookup(context, 20)
    assert tokens == _ids("@", "example", ".", "se", ")")  # the line ends there: no cut
    assert spanned == 4  # "bruno.lind" spans br, uno, ., lind


def test_only_word_starts_agreeing_on_the_word_and_the_latest_first() -> None:
    look = TextLookup(_bytes, _tokenize)
    # "ppsala" occurs inside " Uppsala" only (not a word start): nothing
    assert look.lookup([*PROMPT, *_ids('"', "ppsala")], 8) is None
    # "a" starts "ax" and "ayz": which word is being written, the text does not tell
    assert look.lookup(_ids("a", "x", "\n", "a", "y", "z", " ", "a"), 4) is None
    # "a" starts "ay" twice: the latest ("ay c ...") is continued
    tokens, _ = look.lookup(_ids("a", "y", " ", "b", "\n", "a", "y", " ", "c", " ", "a"), 3)
    assert tokens == _ids("y", " ", "c")


def test_nothing_at_a_word_break_or_for_an_unseen_word() -> None:
    look = TextLookup(_bytes, _tokenize)
    assert look.lookup([*PROMPT, *_ids(' "')], 8) is None  # no word being written
    assert look.lookup([*PROMPT, *_ids('"', "z")], 8) is None  # no earlier "z..."
    assert look.lookup([*PROMPT, *_ids('"', "U")], 0) is None


def test_the_text_follows_a_context_that_changed() -> None:
    look = TextLookup(_bytes, _tokenize)
    assert look.lookup([*PROMPT, *_ids('"', "U")], 4) is not None
    # another context (not an extension of the last): its own text, no stale bytes
    other = _ids("a", "x", "y", " ", "a")
    tokens, _ = look.lookup(other, 4)
    assert tokens == _ids("x", "y")  # "xy " cut at the word being written: " " left out


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)])
def test_ngram_drafter_falls_back_to_text(sampling: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    drafter = NgramDrafter()
    drafter.text = TextLookup(_bytes, _tokenize)
    context = [*PROMPT, *_ids('"', "city", '":', ' "', "U")]
    drafter.prefill(PROMPT)
    draft = drafter.propose(context, 4, sampling, rng)
    assert draft.by_text and draft.tokens[0] == IDS["ppsala"] and draft.match_len == 1
    assert len(draft.q) == (0 if sampling.greedy else len(draft.tokens))  # point masses
    # where the tokens match, the token lookup's copy, not the text's
    repeat = [*PROMPT, *_ids(" lives", " in")]
    draft = drafter.propose(repeat, 4, sampling, rng)
    assert not draft.by_text and draft.tokens[0] == IDS[" Uppsala"]
    # unbound: no text lookup
    assert not NgramDrafter().propose(context, 4, sampling, rng).tokens


@pytest.mark.real_model
def test_copies_by_text_keep_greedy_output(real_model_paths) -> None:
    """Greedy output with the lookup by text (bound by the loop) is the target's alone:
    a record copied from a sentence, with and without a grammar."""
    from edgespec.backend import LlamaModel
    from edgespec.grammar import Grammar
    from edgespec.speculation.loop import generate

    prompt = (
        "Bruno Lind is a 51-year-old teacher living in Uppsala (email bruno.lind@example.se)."
        "\nTheir record as JSON (name, age, city, email):\n"
    )
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 30},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120},
                       "city": {"type": "string", "maxLength": 30},
                       "email": {"type": "string", "maxLength": 40}},
        "required": ["name", "age", "city", "email"], "additionalProperties": False,
    }  # fmt: skip
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=512, n_threads=2) as target:
        for grammar in (None, Grammar.from_json_schema(schema)):
            plain = generate(target, prompt, max_tokens=48, gamma=0, grammar=grammar)
            drafter = NgramDrafter()
            spec = generate(target, prompt, drafter=drafter, max_tokens=48, grammar=grammar)
            assert spec.tokens == plain.tokens
            assert drafter.text is not None  # (bound by the loop)
