"""Snapshot tests of the main screen at 80x24 (pytest-textual-snapshot).

Update after an intended change with ``pytest tests/tui --snapshot-update`` and
look at the SVGs in tests/tui/__snapshots__/ before committing them.
"""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import send, settle
from tests.tui.fakes import FakeEngine


async def _after_a_reply(pilot: Pilot) -> None:
    await settle(pilot)
    await send(pilot, "Tell me about the sea")
    pilot.app.clear_notifications()
    await pilot.pause()


async def _loaded(pilot: Pilot) -> None:
    await settle(pilot)
    pilot.app.clear_notifications()
    await pilot.pause()


def test_main_screen_after_a_reply(snap_compare, app_with) -> None:
    app = app_with(FakeEngine(), show_rejected=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_after_a_reply)


def test_completion_mode_screen(snap_compare, app_with) -> None:
    app = app_with(FakeEngine(chat_mode=False, draft=None, target="base-model"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_loaded)
