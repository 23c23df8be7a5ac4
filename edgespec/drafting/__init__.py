"""Drafters: everything that proposes tokens for the target to verify.

``base`` holds the contract (``Drafter``, ``Draft``); ``model`` a same-vocabulary
draft model; ``ngram`` prompt lookup; ``crossvocab`` and ``tli`` a draft model with
another vocabulary; ``composite`` two drafters in turn; ``compat`` llama.cpp's rule
for sharing token ids; ``build`` the one way from a spec (``ngram+MODEL``) to a drafter.
"""

from .base import Draft, Drafter, KeepDrafting, draw_token
from .build import build_drafter
from .composite import CompositeDrafter
from .model import ModelDrafter

__all__ = [
    "CompositeDrafter",
    "Draft",
    "Drafter",
    "KeepDrafting",
    "ModelDrafter",
    "build_drafter",
    "draw_token",
]
