"""Fixtures for the chat app's tests: a private data directory and an app factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from edgespec_tui.app import EdgespecApp, make_app
from edgespec_tui.session import GenerationSettings
from edgespec_tui.store import ConversationStore
from textual.pilot import Pilot

from tests.tui.fakes import FakeEngine


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Conversations go to a temporary directory (also via $EDGESPEC_DATA_DIR)."""
    d = tmp_path / "data"
    monkeypatch.setenv("EDGESPEC_DATA_DIR", str(d))
    return d


@pytest.fixture
def app_with(data_dir: Path) -> Callable[..., EdgespecApp]:
    """Build the app around a FakeEngine: app_with(engine, linger_s=..., ...)."""

    def build(engine: FakeEngine | None = None, **kwargs) -> EdgespecApp:
        eng = engine or FakeEngine()
        kwargs.setdefault("settings", GenerationSettings(gamma=3))
        return make_app(lambda: eng, store=ConversationStore(data_dir), **kwargs)

    return build


async def settle(pilot: Pilot) -> None:
    """Wait until every engine worker finished and the UI handled what they posted."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


async def send(pilot: Pilot, text: str, *, wait: bool = True) -> None:
    """Type text into the message box and press Enter."""
    await pilot.press(*text)
    await pilot.press("enter")
    if wait:
        await settle(pilot)
