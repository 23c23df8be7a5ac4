"""The library API (``import edgespec``): load, generate, stream_generate, chat, errors."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import edgespec
from edgespec import (
    DoneEvent,
    EdgespecError,
    InvalidParameterError,
    LoadOptions,
    ModelLoadError,
    ModelPair,
    RoundEvent,
    SamplingParams,
    TokenEvent,
    TokenKind,
)

README = Path(__file__).resolve().parent.parent / "README.md"
PROMPT = "one two three four five six seven eight one two three four five six seven eight one"


def readme_library_example() -> str:
    """The README's first python block: its library example."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README.md has no python example"
    return blocks[0]


def test_import_is_cheap_and_loads_no_llama_cpp() -> None:
    code = "import sys, edgespec; edgespec.SamplingParams; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_exported_name_resolves() -> None:
    assert len(set(edgespec.__all__)) == len(edgespec.__all__)
    for name in edgespec.__all__:
        assert getattr(edgespec, name) is not None, name
    assert {"load", "generate", "stream_generate", "chat", "LoadOptions"} <= set(dir(edgespec))
    with pytest.raises(AttributeError):
        _ = edgespec.no_such_name


def test_the_package_is_typed() -> None:
    assert (Path(edgespec.__file__).parent / "py.typed").is_file()


@pytest.fixture(scope="module")
def target_path(synthetic_models) -> str:
    return str(synthetic_models["target"])


def test_greedy_speculative_equals_plain(target_path: str, synthetic_models) -> None:
    """With the n-gram lookup and with a draft model, greedy output is the target's own."""
    with edgespec.load(target_path, "none", n_ctx=256, n_threads=1) as plain:
        want = plain.generate(PROMPT, max_tokens=40)
        assert want.stats.drafted == 0
    for draft in ("ngram", str(synthetic_models["draft_noisy"])):
        with edgespec.load(target_path, draft, n_ctx=256, n_threads=1) as pair:
            got = edgespec.generate(pair, PROMPT, max_tokens=40, gamma=4)
            assert got.tokens == want.tokens and got.text == want.text, draft
            if draft != "ngram":
                assert got.stats.drafted > 0
    assert pair.drafter is None  # closed with the with block


def test_stream_generate_yields_the_event_types(target_path: str, synthetic_models) -> None:
    draft = str(synthetic_models["draft_noisy"])
    with edgespec.load(target_path, draft, n_ctx=256, n_threads=1) as pair:
        events = list(pair.stream_generate(PROMPT, max_tokens=24, gamma=3))
        # sampled too: the same event types, repeatable with a seed
        sampled = [
            pair.generate(
                PROMPT, max_tokens=16, sampling=SamplingParams(temperature=0.8), seed=7, gamma=3
            )
            for _ in range(2)
        ]
    assert isinstance(events[-1], DoneEvent)
    assert all(isinstance(e, TokenEvent | RoundEvent) for e in events[:-1])
    kept = [e for e in events if isinstance(e, TokenEvent) and e.kind is not TokenKind.REJECTED]
    done = events[-1]
    assert [e.token for e in kept] == list(done.tokens)
    assert "".join(e.text for e in kept) == done.text
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert len(rounds) == done.stats.rounds == done.stats.target_calls
    assert sampled[0].tokens == sampled[1].tokens


def test_the_pair_drafts_from_its_earlier_generations(target_path: str) -> None:
    with edgespec.load(target_path, "ngram", n_ctx=256, n_threads=1) as pair:
        assert pair.history is not None and pair.history.documents == 0
        first = pair.generate(PROMPT, max_tokens=8, gamma=2)
        assert pair.history.documents == 1
        pair.set_drafter("none")
        assert pair.drafter is None and pair.draft == "none"
        assert pair.generate(PROMPT, max_tokens=8).tokens == first.tokens
    with edgespec.load(target_path, "ngram", n_ctx=256, n_threads=1, history=False) as pair:
        pair.generate(PROMPT, max_tokens=4)
        assert pair.history is None


def test_load_options_are_one_object_for_every_front_end() -> None:
    from edgespec import add_model_options, load_options

    p = argparse.ArgumentParser()
    add_model_options(p, rpc=True)
    opts = load_options(p.parse_args(["--ctx", "512", "--threads", "1", "--rpc", "h:1,h:2"]))
    assert opts == LoadOptions(n_ctx=512, n_threads=1, rpc=("h:1", "h:2"))
    assert LoadOptions(rpc=["a:1"]).rpc == ("a:1",)
    assert opts.replace(parallel=4).parallel == 4

    from edgespec_tui.session import GenerationSettings, ModelChoice

    choice = ModelChoice(target="t.gguf", draft="ngram", n_ctx=512)
    assert isinstance(choice, LoadOptions) and choice.options == LoadOptions(n_ctx=512)
    settings = GenerationSettings(gamma=3, temperature=0.5)
    assert isinstance(settings, SamplingParams)
    assert settings.sampling() == SamplingParams(temperature=0.5)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda p: edgespec.load("no-such-model-anywhere"), ModelLoadError),
        (lambda p: edgespec.load(p, "none", n_ctx="big"), InvalidParameterError),
        (lambda p: edgespec.load(p, "none", bogus=1), InvalidParameterError),
        (lambda p: edgespec.load(p, "none", parallel=0), InvalidParameterError),
        (lambda p: edgespec.load(p, "none", rpc_timeout=-1), InvalidParameterError),
        (lambda p: edgespec.load(p, "no-such-draft.gguf"), ModelLoadError),
        (lambda p: SamplingParams(temperature=-1), InvalidParameterError),
    ],
)
def test_bad_input_is_one_line(target_path: str, call, error) -> None:
    with pytest.raises(error) as info:
        call(target_path)
    assert isinstance(info.value, EdgespecError)
    assert str(info.value) and "\n" not in str(info.value)


def test_bad_generation_input_is_one_line(target_path: str) -> None:
    with edgespec.load(target_path, "ngram", n_ctx=256, n_threads=1) as pair:
        for bad in (
            lambda: pair.generate(PROMPT, max_tokens=-1),
            lambda: pair.generate(PROMPT, gamma="many"),
            lambda: pair.generate([]),  # no tokens
            lambda: pair.generate("word " * 400),  # over the context
        ):
            with pytest.raises(EdgespecError) as info:
                bad()
            assert "\n" not in str(info.value)
        assert len(pair.generate(PROMPT, max_tokens=3).tokens) <= 3  # still usable


@pytest.mark.real_model
def test_chat_on_smollm2_is_the_targets_own(real_model_paths) -> None:
    messages = [{"role": "user", "content": "Name three colours."}]
    path = str(real_model_paths["smollm2-135m-instruct"])
    with edgespec.load(path, "ngram", n_ctx=1024, n_threads=2) as pair:
        assert pair.chat_format is not None  # the model's own template
        prompt = pair.chat_prompt(messages)
        assert prompt[: len(pair.tokenize("<|im_start|>"))] == pair.tokenize("<|im_start|>")
        spec = pair.chat(messages, max_tokens=24, gamma=3)
        streamed = list(edgespec.stream_chat(pair, messages, max_tokens=24, gamma=3))
        pair.set_drafter("none")
        plain = edgespec.chat(pair, messages, max_tokens=24)
    assert spec.tokens == plain.tokens and spec.text == plain.text and spec.text.strip()
    assert streamed[-1] == DoneEvent(spec.text, spec.tokens, spec.stop_reason, streamed[-1].stats)


@pytest.mark.real_model
def test_the_readme_library_example_runs(real_model_paths, capsys) -> None:
    """The README's library example, as written there, on the offline Gemma 3 270M."""
    assert real_model_paths["gemma-3-270m"].is_file()  # in the model cache: no fetch
    exec(compile(readme_library_example(), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert len(re.findall(r"[A-Za-z]{2,}", out)) >= 5, out


def test_a_pair_from_loaded_models(target_path: str) -> None:
    """ModelPair wraps models loaded otherwise (the chat app's tests do)."""
    target = edgespec.LlamaModel(Path(target_path), n_ctx=256, n_threads=1)
    with ModelPair(target, None, history=False) as pair:
        assert pair.n_ctx == target.n_ctx and "none" in repr(pair)
        assert isinstance(pair.generate(PROMPT, max_tokens=4), DoneEvent)


def test_a_drafter_of_ones_own_and_a_policy_carried_across_calls(target_path: str) -> None:
    """ModelPair(target, drafter) with a policy made once and passed as gamma to every
    call (what a benchmark of short requests does): still the target's own output."""
    target = edgespec.LlamaModel(Path(target_path), n_ctx=256, n_threads=1)
    with ModelPair(target, edgespec.NgramDrafter(), history=False) as pair:
        plain = ModelPair(target, None, history=False).generate(PROMPT, max_tokens=24)
        policy = edgespec.make_policy(pair.target, pair.drafter)
        assert isinstance(policy, edgespec.AdaptiveGamma)
        for _ in range(2):
            done = pair.generate(PROMPT, max_tokens=24, gamma=policy, grammar_drafts=False)
            assert done.tokens == plain.tokens
        pair.drafter = edgespec.build_drafter(
            target, "ngram", resolve=edgespec.resolve_model, n_ctx=target.n_ctx
        )
        assert pair.generate(PROMPT, max_tokens=24, gamma=3).tokens == plain.tokens


def test_python_dash_m_edgespec_is_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edgespec", "--help"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("usage: edgespec")
