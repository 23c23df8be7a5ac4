"""Stats-panel figures from engine events."""

from __future__ import annotations

import pytest
from edgespec_tui.metrics import PlainCallMeter, ReplyMetrics
from edgespec_tui.widgets.stats_panel import bar

from edgespec.events import DoneEvent, RoundEvent, Stats, StopReason


def test_histogram_and_speedup_estimates() -> None:
    m = ReplyMetrics(gamma=3)
    meter = PlainCallMeter()
    s1 = Stats(drafted=3, accepted=3, generated=4, target_calls=1, verify_s=0.1, wall_s=0.2)
    s2 = Stats(drafted=6, accepted=4, generated=6, target_calls=2, verify_s=0.2, wall_s=0.4)
    m.on_round(RoundEvent(1, 3, 3, s1), meter)
    m.on_round(RoundEvent(2, 3, 1, s2), meter)
    assert m.histogram_rows() == [(0, 0), (1, 1), (2, 0), (3, 1)]
    est = m.speedup(meter)
    assert est is not None and est.basis == "verify"
    assert est.factor == pytest.approx(6 * 0.1 / 0.4)
    meter.add(0.05)
    est = m.speedup(meter)
    assert est.basis == "plain" and est.factor == pytest.approx(6 * 0.05 / 0.4)
    m.on_done(DoneEvent("x", (1,), StopReason.EOG, s2))
    assert m.done and m.stop_reason == "eog"


def test_plain_rounds_feed_the_meter_and_give_no_speedup() -> None:
    m, meter = ReplyMetrics(), PlainCallMeter()
    m.on_round(RoundEvent(1, 0, 0, Stats(generated=1, target_calls=1, verify_s=0.03)), meter)
    m.on_round(RoundEvent(2, 0, 0, Stats(generated=2, target_calls=2, verify_s=0.08)), meter)
    assert meter.mean_s == pytest.approx(0.04)
    assert m.speedup(meter) is None and not m.speculative


def test_bar() -> None:
    assert bar(0, 5) == "" and bar(5, 5) == "█" * 12 and bar(1, 16) == "▊"
