"""llama-server's utility endpoints: POST /tokenize and /detokenize, GET /props.

Fields and answers as llama-server's (tools/server/server-context.cpp). They
read only the vocabulary, which llama.cpp never changes after loading, so they
run on the connection's thread instead of waiting for the worker.
"""

from __future__ import annotations

from typing import Any

from ..chat_template import CHATML
from ..completion.session import CompletionSession
from ..sampling import DEFAULT_MIN_P, DEFAULT_PENALTY_LAST_N, DEFAULT_TOP_K, DEFAULT_TOP_P
from ..speculation.loop import DEFAULT_MAX_TOKENS
from ..version import __version__
from .errors import bad_request
from .fields import Fields


def tokenize(session: CompletionSession, data: dict[str, Any]) -> dict[str, Any]:
    """/tokenize: ``content`` (a string, or a list of strings and token ids) to tokens.

    ``add_special`` (default false) adds BOS where the model wants it, before a
    first string only; ``parse_special`` (default true) reads special tokens'
    text as those tokens; ``with_pieces`` answers ``{"id", "piece"}`` objects,
    a piece that is not valid UTF-8 as its list of bytes.
    """
    f = Fields(data)
    add_special = f.boolean("add_special", False)
    parse_special = f.boolean("parse_special", True)
    with_pieces = f.boolean("with_pieces", False)
    content = data.get("content")
    if content is None:
        return {"tokens": []}
    parts = content if isinstance(content, list) else [content]
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, int) and not isinstance(part, bool):
            tokens.append(part)
        elif isinstance(part, str):
            text = f.text(part, "content")
            tokens += session.target.tokenize(
                text, add_special=add_special and i == 0, parse_special=parse_special
            )
        else:
            raise bad_request(
                "'content' must be a string or a list of strings and token ids", param="content"
            )
    if not with_pieces:
        return {"tokens": tokens}
    session.check_tokens(tokens)
    out = []
    for t in tokens:
        piece = session.target.token_bytes(t, special=True)
        try:
            shown: str | list[int] = piece.decode("utf-8")
        except UnicodeDecodeError:
            shown = list(piece)
        out.append({"id": t, "piece": shown})
    return {"tokens": out}


def detokenize(session: CompletionSession, data: dict[str, Any]) -> dict[str, Any]:
    """/detokenize: ``tokens`` (ids) to their text, special tokens included."""
    tokens = data.get("tokens")
    if tokens is None:
        return {"content": ""}
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise bad_request("'tokens' must be a list of token ids", param="tokens")
    session.check_tokens(tokens)
    raw = b"".join(session.target.token_bytes(t, special=True) for t in tokens)
    return {"content": raw.decode("utf-8", "replace")}


def default_params() -> dict[str, Any]:
    """A request's defaults, under llama-server's names."""
    return {
        "seed": -1,
        "temperature": 0.0,
        "top_k": DEFAULT_TOP_K,
        "top_p": DEFAULT_TOP_P,
        "min_p": DEFAULT_MIN_P,
        "repeat_last_n": DEFAULT_PENALTY_LAST_N,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": [],
        "max_tokens": DEFAULT_MAX_TOKENS,
        "n_predict": DEFAULT_MAX_TOKENS,
        "stream": False,
        "n_probs": 0,
        "samplers": ["penalties", "top_k", "min_p", "top_p", "temperature"],
        "cache_prompt": True,
        "t_max_predict_ms": 0,
    }


def props(session: CompletionSession) -> dict[str, Any]:
    """/props: the server's settings, under llama-server's names (and edgespec's own)."""
    target = session.target
    info = target.vocab_info()

    def text(token: int) -> str:
        if not 0 <= token < target.n_vocab:
            return ""
        return target.token_bytes(token, special=True).decode("utf-8", "replace")

    return {
        "default_generation_settings": {"params": default_params(), "n_ctx": target.n_ctx},
        "total_slots": 1,
        "model_alias": session.name,
        "model_path": str(target.path),
        "modalities": {"vision": False, "audio": False},
        "chat_template": session.chat_template or CHATML,  # the one in use: ChatML without one
        "bos_token": text(info.bos),
        "eos_token": text(info.eos),
        "build_info": f"edgespec {__version__}",
        "is_sleeping": False,
        "edgespec": {
            "drafter": session.drafter_name,
            "gamma": session.gamma,
            "fim": session.has_fim,
            "n_vocab": target.n_vocab,
        },
    }
