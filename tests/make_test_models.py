"""Write tiny synthetic GGUF models for fast speculative-decoding tests.

Usage::

    python tests/make_test_models.py OUT_DIR

All models use the ``llama`` architecture (2 layers, 64-wide, random F32
weights from fixed seeds) and a small SentencePiece-style vocabulary with
byte fallback, so llama.cpp loads them, tokenizes any UTF-8 text and runs
them in milliseconds.  The output is deterministic: the same bytes each run.

Files written (name -> what it is for):

* ``target``          -- the target model.
* ``draft_same``      -- the target's weights exactly (every draft accepted).
* ``draft_noisy``     -- target weights plus Gaussian noise (partial agreement).
* ``draft_unrelated`` -- independent weights, same vocabulary (low agreement).
* ``draft_badvocab``  -- like ``draft_unrelated`` with one token text changed.
* ``draft_bigvocab``  -- the target plus extra tokens appended (vocab too big).
* ``draft_permuted``  -- the target's pieces and weights under shuffled token ids:
  another vocabulary, the same model on text (cross-vocabulary drafting).
* ``draft_splitvocab`` -- the target without its pieces longer than
  ``SPLIT_MAX_CHARS`` (words split differently, other ids), target weights for
  the rest: another vocabulary that agrees with the target part of the time.
* ``target_fim``      -- the target plus fill-in-the-middle and ChatML control
  tokens (``FIM_TOKENS``, never generated: zero output rows), their GGUF FIM ids
  and a ChatML chat template: a code-completion/chat server target.
"""

from __future__ import annotations

import pathlib
import sys
from dataclasses import dataclass

import gguf
import numpy as np

# ---------------------------------------------------------------- hyperparameters

N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
CONTEXT_LENGTH = 1024
HEAD_DIM = N_EMBD // N_HEAD
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0

TARGET_SEED = 1234
UNRELATED_SEED = 5678
NOISE_SEED = 4321
EXTRA_SEED = 8765
PERMUTE_SEED = 2468

#: Gain of the final RMSNorm: sets how peaked next-token distributions are.
OUTPUT_NORM_GAIN = 1.0
#: Std of the output projection (logit std is about sqrt(N_EMBD) times this).
OUTPUT_STD = 0.5
#: Output rows of the byte tokens are scaled by this, so that generated text
#: is mostly word pieces with an occasional raw byte.
BYTE_OUTPUT_SCALE = 0.7
#: Noise added to every weight matrix of ``draft_noisy``, relative to its std;
#: 0.08 gives about 73% greedy agreement with the target (unrelated: ~0%).
NOISE_REL = 0.08

#: ``draft_badvocab`` renames this token (its id is >= 5).
BADVOCAB_FROM = "\u2581the"
BADVOCAB_TO = "\u2581thx"
#: ``draft_bigvocab`` appends this many tokens (more than llama.cpp's 128).
BIGVOCAB_EXTRA = 160
#: ``draft_splitvocab`` keeps the normal pieces of at most this many characters.
SPLIT_MAX_CHARS = 3
#: ``target_fim`` appends these control tokens; the GGUF key each one fills.
FIM_TOKENS = {
    "<|fim_prefix|>": "tokenizer.ggml.fim_pre_token_id",
    "<|fim_suffix|>": "tokenizer.ggml.fim_suf_token_id",
    "<|fim_middle|>": "tokenizer.ggml.fim_mid_token_id",
    "<|fim_pad|>": "tokenizer.ggml.fim_pad_token_id",
    "<|repo_name|>": "tokenizer.ggml.fim_rep_token_id",
    "<|file_sep|>": "tokenizer.ggml.fim_sep_token_id",
    "<|im_start|>": None,
    "<|im_end|>": "tokenizer.ggml.eot_token_id",
}
#: ``target_fim``'s chat template (ChatML, as Qwen and SmolLM use).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# ---------------------------------------------------------------- vocabulary

FIRST_BYTE_ID = 3  # <0x00>; the byte tokens follow <unk>, <s>, </s>
SPACE = "\u2581"  # SentencePiece's visible space, "▁"

_WORDS = """
the a an and of to in is it that for on with as was he she we you they be at
by this have from or not but all what one can will said there time people
world Hello The I This It caf
"""
_SUFFIXES = "s ing ed er es ly tion ment est al en re th he an on at or ou st ll nd ar le"
_SINGLE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?;:'\"-()/"
#: Multibyte pieces: whole-token accented letters and one CJK word; other CJK
#: characters (e.g. "語") and emoji fall back to their UTF-8 bytes.
_MULTIBYTE = ["é", "ü", "ö", "ä", "ñ", "ç", "à", "è", "ß", "€", "—", "日", "本", "日本"]
_SPACED_EXTRA = ["日本", "é", "(", '"', *"0123456789"]


def _pieces() -> list[str]:
    """Return the normal (non-special, non-byte) token texts, deduplicated.

    Every prefix of a multi-character piece is included too, so SentencePiece's
    pairwise merges can always grow a word from its characters.
    """
    wanted = [SPACE, *_SINGLE, *_MULTIBYTE]
    wanted += [SPACE + w for w in _WORDS.split()]
    wanted += _SUFFIXES.split()
    wanted += [SPACE + w for w in _SPACED_EXTRA]
    out: dict[str, None] = {}
    for piece in wanted:
        for end in range(1, len(piece) + 1):
            out.setdefault(piece[:end], None)
    return list(out)


@dataclass(frozen=True)
class Vocab:
    """A llama-style (SentencePiece) vocabulary: texts, scores and types."""

    tokens: list[str]
    scores: list[float]
    types: list[int]


def build_vocab() -> Vocab:
    """Build the shared vocabulary.

    Layout as in Llama 2: ``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, the 256 byte
    tokens ``<0x00>``..``<0xFF>`` at 3..258, then the normal pieces.  A normal
    piece scores its length, so longer pieces win merges.
    """
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    for piece in _pieces():
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
        scores.append(float(len(piece)))
    return Vocab(tokens, scores, [int(t) for t in types])


def _badvocab(vocab: Vocab) -> Vocab:
    """Return ``vocab`` with the one token ``BADVOCAB_FROM`` renamed."""
    tokens = list(vocab.tokens)
    tokens[tokens.index(BADVOCAB_FROM)] = BADVOCAB_TO
    return Vocab(tokens, vocab.scores, vocab.types)


def _bigvocab(vocab: Vocab) -> Vocab:
    """Return ``vocab`` with ``BIGVOCAB_EXTRA`` unreachable tokens appended."""
    extra = [f"<extra_{i}>" for i in range(BIGVOCAB_EXTRA)]
    return Vocab(
        vocab.tokens + extra,
        vocab.scores + [0.0] * len(extra),
        vocab.types + [int(gguf.TokenType.NORMAL)] * len(extra),
    )


def _fimvocab(vocab: Vocab) -> Vocab:
    """Return ``vocab`` with the ``FIM_TOKENS`` appended as control tokens."""
    extra = list(FIM_TOKENS)
    return Vocab(
        vocab.tokens + extra,
        vocab.scores + [0.0] * len(extra),
        vocab.types + [int(gguf.TokenType.CONTROL)] * len(extra),
    )


# ---------------------------------------------------------------- weights

Weights = dict[str, np.ndarray]


def random_weights(seed: int, n_vocab: int) -> Weights:
    """Return random llama weights (numpy shapes are ggml shapes reversed)."""
    rng = np.random.default_rng(seed)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    n_kv = N_HEAD_KV * HEAD_DIM
    w: Weights = {"token_embd.weight": normal((n_vocab, N_EMBD), 1.0)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        w[p + "attn_q.weight"] = normal((N_EMBD, N_EMBD), N_EMBD**-0.5)
        w[p + "attn_k.weight"] = normal((n_kv, N_EMBD), N_EMBD**-0.5)
        w[p + "attn_v.weight"] = normal((n_kv, N_EMBD), N_EMBD**-0.5)
        w[p + "attn_output.weight"] = normal((N_EMBD, N_EMBD), N_EMBD**-0.5)
        w[p + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        w[p + "ffn_gate.weight"] = normal((N_FF, N_EMBD), N_EMBD**-0.5)
        w[p + "ffn_up.weight"] = normal((N_FF, N_EMBD), N_EMBD**-0.5)
        w[p + "ffn_down.weight"] = normal((N_EMBD, N_FF), N_FF**-0.5)
    w["output_norm.weight"] = np.full(N_EMBD, OUTPUT_NORM_GAIN, dtype=np.float32)
    output = normal((n_vocab, N_EMBD), OUTPUT_STD)
    output[FIRST_BYTE_ID : FIRST_BYTE_ID + 256] *= BYTE_OUTPUT_SCALE
    w["output.weight"] = output
    return w


def add_noise(weights: Weights, rel: float, seed: int) -> Weights:
    """Return ``weights`` with Gaussian noise of ``rel`` times each matrix's std."""
    rng = np.random.default_rng(seed)
    out: Weights = {}
    for name, w in weights.items():
        if w.ndim == 2:
            noise = rng.standard_normal(w.shape) * (rel * float(w.std()))
            w = (w + noise).astype(np.float32)
        out[name] = w
    return out


def grow_vocab(weights: Weights, n_extra: int, seed: int) -> Weights:
    """Append ``n_extra`` token rows: random input embeddings, zero output rows.

    Zero output rows give the new tokens logit 0, below the usual top logit, so
    greedy decoding matches the smaller model's.
    """
    rng = np.random.default_rng(seed)
    out = dict(weights)
    extra = rng.standard_normal((n_extra, N_EMBD)).astype(np.float32)
    out["token_embd.weight"] = np.concatenate([weights["token_embd.weight"], extra])
    zeros = np.zeros((n_extra, N_EMBD), dtype=np.float32)
    out["output.weight"] = np.concatenate([weights["output.weight"], zeros])
    return out


def cross_vocab_models(vocab: Vocab, weights: Weights) -> dict[str, tuple[Vocab, Weights]]:
    """``draft_permuted`` and ``draft_splitvocab``: other vocabularies over ``weights``.

    Token ids keep <unk>, <s>, </s> at 0..2. A model keeps each piece's
    embedding and output rows under its new id, so the permuted model computes
    the same thing as the target on any text.
    """

    def select(order: list[int]) -> tuple[Vocab, Weights]:
        new_vocab = Vocab(
            [vocab.tokens[i] for i in order],
            [vocab.scores[i] for i in order],
            [vocab.types[i] for i in order],
        )
        new_weights = dict(weights)
        for name in ("token_embd.weight", "output.weight"):
            new_weights[name] = np.ascontiguousarray(weights[name][order])
        return new_vocab, new_weights

    rng = np.random.default_rng(PERMUTE_SEED)
    shuffled = [0, 1, 2, *(3 + rng.permutation(len(vocab.tokens) - 3)).tolist()]
    short = [
        i
        for i, (text, kind) in enumerate(zip(vocab.tokens, vocab.types, strict=True))
        if kind != gguf.TokenType.NORMAL or len(text) <= SPLIT_MAX_CHARS
    ]
    return {"draft_permuted": select(shuffled), "draft_splitvocab": select(short)}


# ---------------------------------------------------------------- writing


def write_gguf(path: pathlib.Path, name: str, vocab: Vocab, weights: Weights) -> None:
    """Write one llama-architecture GGUF file with ``vocab`` and ``weights``.

    A vocabulary holding the ``FIM_TOKENS`` also gets their ids under the GGUF
    FIM/EOT keys and the ChatML chat template.
    """
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)

    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    if all(t in vocab.tokens for t in FIM_TOKENS):
        for text, key in FIM_TOKENS.items():
            if key is not None:
                writer.add_uint32(key, vocab.tokens.index(text))
        writer.add_chat_template(CHATML_TEMPLATE)

    for tensor_name, array in weights.items():
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build_test_models(out_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write every test model into ``out_dir``; return a name -> path mapping."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    n_vocab = len(vocab.tokens)
    target = random_weights(TARGET_SEED, n_vocab)
    unrelated = random_weights(UNRELATED_SEED, n_vocab)
    models: dict[str, tuple[Vocab, Weights]] = {
        "target": (vocab, target),
        "draft_same": (vocab, target),
        "draft_noisy": (vocab, add_noise(target, NOISE_REL, NOISE_SEED)),
        "draft_unrelated": (vocab, unrelated),
        "draft_badvocab": (_badvocab(vocab), unrelated),
        "draft_bigvocab": (_bigvocab(vocab), grow_vocab(target, BIGVOCAB_EXTRA, EXTRA_SEED)),
        **cross_vocab_models(vocab, target),
        "target_fim": (_fimvocab(vocab), grow_vocab(target, len(FIM_TOKENS), EXTRA_SEED)),
    }
    paths: dict[str, pathlib.Path] = {}
    for name, (model_vocab, weights) in models.items():
        path = out_dir / f"{name}.gguf"
        write_gguf(path, f"edgespec-test-{name}", model_vocab, weights)
        paths[name] = path
    return paths


def write_without_byte_tokens(path: pathlib.Path) -> pathlib.Path:
    """Write a broken model: the target's SentencePiece vocabulary minus its 256 byte tokens.

    llama.cpp loads it, then aborts when a prompt needs a byte fallback (e.g. "語").
    """
    vocab = build_vocab()
    keep = [i for i, kind in enumerate(vocab.types) if kind != gguf.TokenType.BYTE]
    broken = Vocab(
        [vocab.tokens[i] for i in keep],
        [vocab.scores[i] for i in keep],
        [vocab.types[i] for i in keep],
    )
    write_gguf(path, "edgespec-test-no-byte-tokens", broken, random_weights(TARGET_SEED, len(keep)))
    return path


def main(argv: list[str]) -> int:
    """Command-line entry point: ``make_test_models.py OUT_DIR``."""
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    for path in build_test_models(pathlib.Path(argv[1])).values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
