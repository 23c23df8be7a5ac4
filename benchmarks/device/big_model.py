"""Write a synthetic model big enough to be memory-bound on a GPU, and its draft.

``big_target`` has a Llama-3-8B-like layer (4096 wide, 32 heads over 8 KV heads,
14336-wide FFN) with Q8_0 weights: 16 layers are about 3.7 GB, which an H200
streams in about a millisecond per token, far above its kernel-launch overhead.
Weights are random (costs do not depend on their values); the vocabulary is
tests/make_test_models.py's, so its tiny models draft for this one too.

``big_draft`` is ``big_target`` cut to its first ``DRAFT_LAYERS`` layers, with the
same embeddings and output head. The blocks write into the residual stream with
gain ``RESIDUAL_GAIN``, so the first layer already predicts much of what all of
them do: a draft that agrees with the target part of the time, at a fraction of
its cost, as a real small model of the same family would.

    python benchmarks/device/big_model.py OUT_DIR [--layers 16] [--embd 4096] [--ff 14336]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import pathlib
import sys
from dataclasses import dataclass

import gguf
import numpy as np

Q8_0 = gguf.GGMLQuantizationType.Q8_0
QK8_0 = 32  # weights per Q8_0 block: an f16 scale, then 32 int8
INT8_STD = float(np.arange(-128, 128).std())  # of the uniform int8 drawn below
SEED = 97
#: Std of the residual-writing matrices (attn_output, ffn_down) relative to 1/sqrt(n_in):
#: 0.05 gave 60% greedy acceptance for the 1-layer draft (16 layers, 256 wide, CPU).
RESIDUAL_GAIN = 0.05
#: Logit std (before softmax) the output head aims at: peaked, like a trained model.
LOGIT_STD = 4.0
DRAFT_LAYERS = 1
CONTEXT_LENGTH = 4096


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of the big model."""

    n_layer: int = 16
    n_embd: int = 4096
    n_head: int = 32
    n_head_kv: int = 8
    n_ff: int = 14336

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.n_embd // self.n_head


@functools.cache
def _test_models():
    """tests/make_test_models.py as a module (for its vocabulary)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "make_test_models.py"
    spec = importlib.util.spec_from_file_location("make_test_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_test_models", module)
    spec.loader.exec_module(module)
    return module


def q8_0_random(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q8_0 weights of ``rows`` x ``cols`` with the given std, as GGUF raw bytes."""
    if cols % QK8_0:
        raise ValueError(f"Q8_0 needs a width divisible by {QK8_0}, not {cols}")
    blocks = np.empty((rows, cols // QK8_0, 2 + QK8_0), dtype=np.uint8)
    scale = np.frombuffer(np.float16(std / INT8_STD).tobytes(), dtype=np.uint8)
    blocks[:, :, :2] = scale
    n = rows * cols  # uniform int8 from raw random bytes: the fastest numpy draw
    blocks[:, :, 2:] = np.frombuffer(rng.bytes(n), dtype=np.uint8).reshape(rows, -1, QK8_0)
    return blocks.reshape(rows, -1)


def big_weights(shape: Shape, n_vocab: int, seed: int = SEED) -> dict[str, tuple[np.ndarray, bool]]:
    """name -> (array, is Q8_0 raw bytes) for every tensor of the big target."""
    rng = np.random.default_rng(seed)
    e, f, kv = shape.n_embd, shape.n_ff, shape.n_head_kv * shape.head_dim
    out: dict[str, tuple[np.ndarray, bool]] = {
        "token_embd.weight": (rng.standard_normal((n_vocab, e), dtype=np.float32), False)
    }
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = (np.ones(e, dtype=np.float32), False)
        out[p + "ffn_norm.weight"] = (np.ones(e, dtype=np.float32), False)
        for name, rows, cols, gain in (
            ("attn_q", e, e, 1.0),
            ("attn_k", kv, e, 1.0),
            ("attn_v", kv, e, 1.0),
            ("attn_output", e, e, RESIDUAL_GAIN),
            ("ffn_gate", f, e, 1.0),
            ("ffn_up", f, e, 1.0),
            ("ffn_down", e, f, RESIDUAL_GAIN),
        ):
            out[p + name + ".weight"] = (q8_0_random(rng, rows, cols, gain * cols**-0.5), True)
    out["output_norm.weight"] = (np.ones(e, dtype=np.float32), False)
    head = rng.standard_normal((n_vocab, e), dtype=np.float32) * (LOGIT_STD * e**-0.5)
    out["output.weight"] = (head, False)
    return out


def write_model(
    path: pathlib.Path, name: str, shape: Shape, weights: dict[str, tuple[np.ndarray, bool]]
) -> None:
    """Write one llama-architecture GGUF with the test vocabulary and ``weights``."""
    vocab = _test_models().build_vocab()
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(len(vocab.tokens))
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab.tokens)
    w.add_token_scores(vocab.scores)
    w.add_token_types(vocab.types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    for tensor_name, (array, quantized) in weights.items():
        w.add_tensor(tensor_name, array, raw_dtype=Q8_0 if quantized else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_big_models(out_dir: pathlib.Path, shape: Shape = Shape()) -> dict[str, pathlib.Path]:
    """Write ``big_target.gguf`` and ``big_draft.gguf`` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n_vocab = len(_test_models().build_vocab().tokens)
    weights = big_weights(shape, n_vocab)
    paths = {"big_target": out_dir / "big_target.gguf", "big_draft": out_dir / "big_draft.gguf"}
    write_model(paths["big_target"], "edgespec-test-big-target", shape, weights)
    draft_shape = Shape(DRAFT_LAYERS, shape.n_embd, shape.n_head, shape.n_head_kv, shape.n_ff)
    kept = {
        k: v
        for k, v in weights.items()
        if not k.startswith("blk.") or int(k.split(".")[1]) < DRAFT_LAYERS
    }
    write_model(paths["big_draft"], "edgespec-test-big-draft", draft_shape, kept)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints each path written and its size."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir", type=pathlib.Path)
    p.add_argument("--layers", type=int, default=Shape.n_layer)
    p.add_argument("--embd", type=int, default=Shape.n_embd)
    p.add_argument("--heads", type=int, default=Shape.n_head)
    p.add_argument("--kv-heads", type=int, default=Shape.n_head_kv)
    p.add_argument("--ff", type=int, default=Shape.n_ff)
    a = p.parse_args(argv)
    shape = Shape(a.layers, a.embd, a.heads, a.kv_heads, a.ff)
    for path in build_big_models(a.out_dir, shape).values():
        print(f"{path} {path.stat().st_size / 1e9:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
