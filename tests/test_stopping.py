"""StopSequenceMatcher on its own: where a stop string starts, and what must be held back."""

from __future__ import annotations

import pytest

from edgespec.sampling.stops import StopSequenceMatcher


def stream(matcher: StopSequenceMatcher, pieces: list[str]) -> tuple[list[str], str, bool]:
    """Feed pieces as the engine does: (what a stream sends each time, final text, stopped)."""
    text, sent, streamed = "", [], 0
    for piece in pieces:
        text += piece
        cut = matcher.find(text, len(piece))
        if cut is not None:
            text = text[:cut]
        end = cut if cut is not None else len(text) - matcher.held_back(text)
        sent.append(text[streamed:end])
        streamed = max(streamed, end)
        if cut is not None:
            return sent, text, True
    return sent, text, False


def test_a_multi_character_stop_is_found_where_it_starts() -> None:
    m = StopSequenceMatcher(["</end>"])
    assert m.find("abc</end>xyz") == 3
    assert m.find("abc</en") is None
    assert m.find("no stop here") is None


def test_the_earliest_of_several_stops_wins() -> None:
    m = StopSequenceMatcher(["world", "o", "lo w"])
    assert m.find("hello world") == 3  # "lo w" (3) before "o" (4) and "world" (6)
    assert m.find("hello world", 4) == 6  # of the matches that end in "orld"


def test_overlapping_stops_hold_back_the_longest_possible_start() -> None:
    # "ab" could begin "abc" and "b" could begin "bcd": hold back the longer, 2
    m = StopSequenceMatcher(["abc", "bcd"])
    assert m.held_back("xxab") == 2
    assert m.held_back("xxb") == 1
    assert m.held_back("xxbc") == 2  # "bc" begins "bcd"
    assert m.find("xxbcd") == 2
    assert m.find("xabcd") == 1  # both match; "abc" starts first


def test_a_stop_spanning_pieces_is_found_and_never_streamed() -> None:
    m = StopSequenceMatcher(["STOP"])
    sent, text, stopped = stream(m, ["Hello S", "T", "O", "P and more"])
    assert stopped and text == "Hello "
    assert sent == ["Hello ", "", "", ""]
    assert "".join(sent) == text


def test_held_back_text_is_released_once_it_cannot_begin_a_stop() -> None:
    m = StopSequenceMatcher(["STOP"])
    sent, text, stopped = stream(m, ["ab ST", "ONE", " end"])
    assert not stopped and text == "ab STONE end"
    assert sent == ["ab ", "STONE", " end"]


def test_a_stream_never_carries_part_of_a_stop_string() -> None:
    stops = ["\n\n", "<|end|>", "ababc"]
    m = StopSequenceMatcher(stops)
    full = "x abab ababc y <|en <|end|> z\n\n"
    for size in (1, 2, 3, 5):
        pieces = [full[i : i + size] for i in range(0, len(full), size)]
        sent, text, stopped = stream(m, pieces)
        assert stopped and text == "x abab "
        streamed = "".join(sent)
        assert text.startswith(streamed)  # the held-back tail is what the final text adds
        for s in stops:
            assert s not in streamed


def test_only_matches_the_new_piece_made_are_looked_for() -> None:
    m = StopSequenceMatcher(["ab"])
    # an "ab" wholly in earlier text was found (or not) back then
    assert m.find("ab--", 2) is None
    assert m.find("ab--", 3) == 0  # the new piece "b--" completes it
    assert m.find("-a", 1) is None
    assert m.find("-ab", 1) == 1  # a match ending in the one new character
    assert m.find("ab--") == 0  # n_new None searches everything


def test_empty_stop_strings_are_ignored() -> None:
    m = StopSequenceMatcher(["", "x"])
    assert m.stops == ("x",)
    assert m.find("abc") is None
    assert m.find("abx") == 2
    assert m.held_back("abc") == 0
    empty = StopSequenceMatcher([""])
    assert empty.find("anything", 3) is None and empty.held_back("anything") == 0


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("", 0),
        ("a", 1),  # "a" begins "abcd"
        ("xab", 2),
        ("xabc", 3),
        ("xabcd", 0),  # a whole stop is find's to report, not held back
        ("abx", 0),
        ("xyz", 0),
    ],
)
def test_held_back_lengths(text: str, held: int) -> None:
    assert StopSequenceMatcher(["abcd"]).held_back(text) == held


def test_no_stops_hold_nothing_back() -> None:
    m = StopSequenceMatcher([])
    assert m.find("anything at all", 5) is None
    assert m.held_back("anything at all") == 0
