"""The live statistics panel: acceptance, tokens per target call, histogram, speed-up."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widget import Widget

from ..metrics import PlainCallMeter, ReplyMetrics
from ..session import EngineInfo, GenerationSettings

BAR_WIDTH = 12
LABEL_WIDTH = 9
DEFAULT_WIDTH = 24  # content columns before the panel has a size (tests of rich_text)
# a model file's quantization at the end of its name: keep it when a name is shortened
_QUANT = re.compile(r"[._-]((?:I?Q\d\w*)|(?:B?F(?:16|32)))$", re.IGNORECASE)
_EIGHTHS = " ▏▎▍▌▋▊▉█"
BASIS_LABEL = {
    "plain": " vs measured plain calls",
    "verify": " vs tokens × verify cost",
}


def bar(count: int, top: int, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of count relative to top, in eighth-cell steps."""
    if top <= 0 or count <= 0:
        return ""
    eighths = max(1, round(count / top * width * 8))
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def fit_name(name: str, width: int) -> str:
    """name in at most width columns: shortened in the middle with "…", keeping the
    start and the end (where a model file names its quantization, e.g. Q4_K_M)."""
    if len(name) <= width:
        return name
    if width < 2:
        return "…"[:width]
    quant = _QUANT.search(name)
    tail = name[quant.start() :] if quant else ""
    if not quant or len(tail) > (width - 1) // 2 + 2:
        tail = name[len(name) - (width - 1) // 2 :] if width > 2 else ""
    return name[: width - 1 - len(tail)] + "…" + tail


def _rule(title: str, width: int = 24) -> str:
    return "──" + title + "─" * max(0, width - 2 - len(title)) + "\n"


class StatsPanel(Widget, can_focus=False):
    """Renders what the engine reported: settings, the current reply's figures, a histogram."""

    COMPONENT_CLASSES = {"stats--heading", "stats--label", "stats--note", "stats--bar"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info: EngineInfo | None = None
        self.settings = GenerationSettings()
        self.metrics: ReplyMetrics | None = None
        self.meter: PlainCallMeter | None = None
        self.status = "loading models…"
        self.note = ""  # the latest settings change (one line, replaced by the next)
        self.auto_gamma: int | None = None  # the draft length auto used in the last reply

    def show(
        self,
        *,
        info: EngineInfo | None = None,
        settings: GenerationSettings | None = None,
        metrics: ReplyMetrics | None = None,
        meter: PlainCallMeter | None = None,
        status: str | None = None,
        clear_metrics: bool = False,
        note: str | None = None,
        auto_gamma: int | None = None,
    ) -> None:
        """Update any of the shown pieces and redraw.

        note replaces the previous one (a change of settings or drafter);
        auto_gamma is shown next to gamma auto.
        """
        self.note = self.note if note is None else note
        self.auto_gamma = self.auto_gamma if auto_gamma is None else auto_gamma
        self.info = info or self.info
        self.settings = settings or self.settings
        self.metrics = None if clear_metrics else (metrics or self.metrics)
        self.meter = meter or self.meter
        self.status = self.status if status is None else status
        self.refresh(layout=True)

    def _style(self, name: str):
        return self.get_component_rich_style(name, partial=True)

    def rich_text(self) -> Text:
        """The panel as styled text."""
        head, label, note = (self._style(f"stats--{n}") for n in ("heading", "label", "note"))
        t = Text(no_wrap=True, overflow="ellipsis", end="")

        width = self.content_size.width or DEFAULT_WIDTH

        def row(name: str, value: str, extra: str = "") -> None:
            t.append(f"{name:<{LABEL_WIDTH}}", label)
            t.append(value)
            if extra:
                t.append(f" {extra}", note)
            t.append("\n")

        def name_row(name: str, value: str) -> None:
            # a name too long for its row gets a line of its own, shortened in the middle
            if LABEL_WIDTH + len(value) <= width:
                row(name, value)
            else:
                t.append(name + "\n", label)
                t.append(f"  {fit_name(value, width - 2)}\n")

        info, s = self.info, self.settings
        name_row("target", info.target if info else "…")
        name_row("draft", (info.draft or "none") if info else "…")
        row("mode", ("chat" if info.chat_mode else "COMPLETION") if info else "…")
        drafting = bool(info and info.draft)
        t.append("γ ", label)
        t.append(str(s.gamma))
        if not drafting:
            t.append(" (off)", note)
        elif s.gamma == "auto" and self.auto_gamma is not None:
            t.append(f" ~{self.auto_gamma}", note)
        t.append(" · temp ", label)
        t.append(f"{s.temperature:g}")
        if s.temperature == 0:
            t.append(" greedy", note)
        t.append("\n")
        if self.note:
            t.append(f"› {self.note}\n", note)
        t.append(_rule(f" reply: {self.status} ", width), head)
        m = self.metrics
        if m is None:
            return t
        st = m.stats
        if m.speculative:
            row("accepted", f"{st.acceptance_rate:.0%}", f"{st.accepted}/{st.drafted}")
        else:
            row("accepted", "–", "no drafts")
        if st.grammar_drafted or st.forced:  # a grammar's own drafts, apart from the drafter's
            row("grammar", f"{st.grammar_accepted}/{st.grammar_drafted}", f"{st.forced} forced")
        row("tok/call", f"{st.mean_accepted_per_call:.2f}", f"{st.target_calls} calls")
        if m.speculative:
            row("γ/round", f"{st.drafted / st.rounds:.1f}" if st.rounds else "–", "drafted")
        row("tok/s", f"{st.tokens_per_second:.1f}", f"{st.generated} tok")
        est = m.speedup(self.meter)
        if est is None:
            row("speed-up", "–", "needs drafts")
        else:
            row("speed-up", f"~{est.factor:.2f}×", "est.")
            t.append(BASIS_LABEL[est.basis] + "\n", note)
        # KV reuse: only the new part of the conversation was processed
        row("prompt", f"+{st.prompt_tokens - st.prompt_cached}", f"({st.prompt_cached} cached)")
        if m.speculative:
            t.append(_rule(" accepted per round ", width), head)
            rows = m.histogram_rows()
            top = max(c for _, c in rows)
            for n, c in rows:
                t.append(f"{n:>2} ", label)
                t.append(f"{bar(c, top):<{BAR_WIDTH}}", self._style("stats--bar"))
                t.append(f" {c}\n")
        t.rstrip()
        return t

    def render(self) -> Text:
        """Textual render hook."""
        return self.rich_text()
