"""Drafters: everything that proposes tokens for the target to verify.

``base`` holds the contract (``Drafter``, ``Draft``); ``model`` a same-vocabulary
draft model; ``ngram`` prompt lookup; ``crossvocab`` and ``tli`` a draft model with
another vocabulary; ``composite`` two drafters in turn; ``compat`` llama.cpp's rule
for sharing token ids.
"""

from .base import Draft, Drafter, KeepDrafting, draw_token
from .composite import CompositeDrafter
from .model import ModelDrafter

__all__ = ["CompositeDrafter", "Draft", "Drafter", "KeepDrafting", "ModelDrafter", "draw_token"]
