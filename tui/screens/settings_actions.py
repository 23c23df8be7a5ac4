"""The chat screen's settings keys: gamma (F2/F3), temperature (F4), drafter (F5) and
rejected tokens (F6). A mixin of ChatScreen, which provides the state it reads
(``settings``, ``runner``, ``engine_info``, ``generating``, ``auto_gamma``).
"""

from __future__ import annotations

from dataclasses import replace

from ..session import GenerationSettings
from ..widgets.assistant_message import AssistantMessage
from ..widgets.stats_panel import StatsPanel

MAX_GAMMA = 16
AUTO = "auto"
TEMPERATURES = (0.0, 0.3, 0.7, 1.0)


class SettingsActions:
    """F2-F6: what the next reply is generated with, changed from the keyboard."""

    settings: GenerationSettings
    auto_gamma: int  # the draft length auto used in its last reply
    generating: bool
    show_rejected: bool

    def action_gamma(self, delta: int) -> None:
        """Draft tokens per round, 0 to 16, from the next reply on.

        From auto, F3 (+1) and F2 (-1) step from the draft length auto used in its
        last reply (``auto_gamma``, shown as "auto ~N"; 0 before any reply); F2 at 0
        goes back to auto.
        """
        g = self.settings.gamma
        gamma: int | str
        if g == AUTO:
            gamma = max(0, min(MAX_GAMMA, self.auto_gamma + delta))
        else:
            stepped = min(int(g), MAX_GAMMA) + delta
            gamma = AUTO if stepped < 0 else min(stepped, MAX_GAMMA)
        what = {AUTO: " (chosen each round)", 0: " (plain decoding)"}.get(gamma, "")
        self._set(replace(self.settings, gamma=gamma), f"gamma = {gamma}{what}")

    def action_temperature(self) -> None:
        """Cycle the temperature through 0 (greedy), 0.3, 0.7, 1.0."""
        t = self.settings.temperature
        nxt = next((x for x in TEMPERATURES if x > t), TEMPERATURES[0])
        self._set(replace(self.settings, temperature=nxt), f"temperature = {nxt:g}")

    def _set(self, settings: GenerationSettings, what: str) -> None:
        self.settings = settings
        self.query_one(StatsPanel).show(settings=settings, note=self._note(what))

    def _note(self, what: str) -> str:
        # settings changes show in the panel, each replacing the last: toasts piled up
        # over the panel and the chat at 80x24
        return what + (" (next reply)" if self.generating else "")

    def action_drafter(self) -> None:
        """Switch to the next drafter (none, n-gram, the --draft model, the target itself)."""
        if self.runner.engine is None or self.engine_info is None:
            self.notify("No model loaded.", severity="warning")
            return
        if self.generating:
            self.notify("Stop the reply first (Esc), then switch drafter.", severity="warning")
            return
        choices = list(self.engine_info.drafter_choices)
        current = self.engine_info.draft or "none"
        nxt = choices[(choices.index(current) + 1) % len(choices)] if current in choices else "none"
        self.query_one(StatsPanel).show(status=f"loading drafter {nxt}…")
        self._switch_drafter(nxt)

    def action_toggle_rejected(self) -> None:
        """Keep rejected draft tokens visible (for study) or let them fade."""
        self.show_rejected = not self.show_rejected
        for msg in self.query(AssistantMessage):
            msg.show_rejected = self.show_rejected
        what = "rejected tokens: " + ("kept" if self.show_rejected else "fade out")
        self.query_one(StatsPanel).show(note=what)
