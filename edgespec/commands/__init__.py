"""Subcommands of the ``edgespec`` CLI, one module each, each with ``register(subparsers)``.

A package adds a subcommand through the ``edgespec.commands`` entry-point group (as
the chat app does); the option groups every command shares, and what they turn into,
are what it uses so that its ``--target``, ``--ctx``, ``--temperature``, ... mean what
the built-in commands' do. They are public as ``edgespec``'s names
(``edgespec.add_model_options``, ``edgespec.load_options``, ...: docs/library.md);
this package, like every module below ``edgespec``, is internal.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DEFAULT_TARGET": "options",
    "DEFAULT_CHAT_TARGET": "options",
    "add_model_options": "options",
    "add_sampling_options": "options",
    "load_options": "options",
    "sampling_from_args": "options",
}
# explicit, and the same names as the table above (tests/test_library.py)
__all__ = [
    "one_line",
    "DEFAULT_TARGET",
    "DEFAULT_CHAT_TARGET",
    "add_model_options",
    "add_sampling_options",
    "load_options",
    "sampling_from_args",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    if name == "one_line":
        from ..errors import one_line

        return one_line
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'edgespec.commands' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


if TYPE_CHECKING:
    from ..errors import one_line
    from .options import (
        DEFAULT_CHAT_TARGET,
        DEFAULT_TARGET,
        add_model_options,
        add_sampling_options,
        load_options,
        sampling_from_args,
    )
