"""The server's counters, and GET /metrics in Prometheus' text exposition format.

Names: a figure llama-server also reports keeps llama-server's name
(``llamacpp:prompt_tokens_total``, ``llamacpp:spec_decode_num_draft_tokens_total``,
... from tools/server/server-task.cpp), so dashboards and alerts written for
llama-server read edgespec unchanged; a figure only edgespec has is named
``edgespec_...``, so nothing pretends to be llama.cpp's. Counters are totals
since the server started.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..events import Stats


@dataclass(frozen=True)
class Metric:
    """One metric family: its name, type ("counter" or "gauge"), help and samples."""

    name: str
    kind: str
    help: str
    samples: tuple[tuple[dict[str, str], float], ...]


def _value(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    esc = {k: v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
           for k, v in labels.items()}  # fmt: skip
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(esc.items())) + "}"


def render(metrics: Iterable[Metric]) -> str:
    """The text exposition format: # HELP, # TYPE, then ``name{labels} value`` lines."""
    lines = []
    for m in metrics:
        lines.append(f"# HELP {m.name} {m.help}")
        lines.append(f"# TYPE {m.name} {m.kind}")
        lines += [f"{m.name}{_labels(lab)} {_value(v)}" for lab, v in m.samples]
    return "\n".join(lines) + "\n"


class Metrics:
    """Totals of the completions served and the HTTP requests answered (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completions = 0
        self.prompt_tokens = 0  # evaluated: the cached part excluded, as llama-server
        self.prompt_cached = 0
        self.prompt_s = 0.0
        self.generated = 0
        self.decode_s = 0.0
        self.drafted = 0
        self.accepted = 0
        self.target_calls = 0
        self.n_tokens_max = 0
        self.requests: dict[tuple[str, str], int] = {}

    def record_completion(self, stats: Stats) -> None:
        """Add one finished (or cancelled) completion's statistics."""
        with self._lock:
            self.completions += 1
            self.prompt_tokens += stats.prompt_tokens - stats.prompt_cached
            self.prompt_cached += stats.prompt_cached
            self.prompt_s += stats.prompt_s
            self.generated += stats.generated
            self.decode_s += stats.decode_s
            self.drafted += stats.drafted
            self.accepted += stats.accepted
            self.target_calls += stats.target_calls
            self.n_tokens_max = max(self.n_tokens_max, stats.prompt_tokens + stats.generated)

    def record_request(self, route: str, status: int) -> None:
        """Count one HTTP answer by route and status code."""
        with self._lock:
            key = (route, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1

    def families(
        self,
        *,
        processing: int,
        deferred: int,
        worker: dict[str, int],
        slots: Sequence[Mapping[str, Any]] = (),
    ) -> list[Metric]:
        """Every metric now; ``worker``: the jobs' counts by outcome (served, cancelled,
        rejected, failed, refused); ``slots``: each slot's state (Slot.state())."""
        with self._lock:

            def one(name: str, kind: str, help: str, v: float) -> Metric:
                return Metric(name, kind, help, (({}, v),))

            ll = "llamacpp:"
            out = [
                one(f"{ll}prompt_tokens_total", "counter",
                    "Number of prompt tokens processed, excluding cached tokens",
                    self.prompt_tokens),
                one(f"{ll}prompt_tokens_cached_total", "counter",
                    "Number of prompt tokens reused from the cache", self.prompt_cached),
                one(f"{ll}prompt_seconds_total", "counter",
                    "Total time spent processing prompts", self.prompt_s),
                one(f"{ll}tokens_predicted_total", "counter",
                    "Number of generation tokens processed", self.generated),
                one(f"{ll}tokens_predicted_seconds_total", "counter",
                    "Total time spent generating tokens", self.decode_s),
                one(f"{ll}n_tokens_max", "counter",
                    "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
                one(f"{ll}spec_decode_num_draft_tokens_total", "counter",
                    "Speculative: Total draft tokens generated", self.drafted),
                one(f"{ll}spec_decode_num_accepted_tokens_total", "counter",
                    "Speculative: Total draft tokens accepted by the target model",
                    self.accepted),
                one(f"{ll}prompt_tokens_seconds", "gauge",
                    "Average prompt throughput in tokens/s",
                    self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else 0.0),
                one(f"{ll}predicted_tokens_seconds", "gauge",
                    "Average generation throughput in tokens/s",
                    self.generated / self.decode_s if self.decode_s > 0 else 0.0),
                one(f"{ll}requests_processing", "gauge",
                    "Number of requests processing", processing),
                one(f"{ll}requests_deferred", "gauge",
                    "Number of requests deferred", deferred),
                one("edgespec_slots", "gauge",
                    "Sequences the server generates on at once (--parallel)", len(slots)),
                Metric("edgespec_slot_processing", "gauge",
                       "Whether each slot is running a request",
                       tuple(({"slot": str(s["id"])}, int(s["is_processing"])) for s in slots)),
                Metric("edgespec_slot_cached_tokens", "gauge",
                       "Tokens in each slot's KV cache",
                       tuple(({"slot": str(s["id"])}, s["n_cached"]) for s in slots)),
                one("edgespec_completions_total", "counter",
                    "Completions run to their end or cancelled", self.completions),
                Metric("edgespec_jobs_total", "counter",
                       "Worker jobs by outcome (served, cancelled, rejected: a client error, "
                       "failed: a server error)",
                       tuple(({"outcome": k}, v) for k, v in sorted(worker.items()))),
                one("edgespec_target_calls_total", "counter",
                    "Target model verify calls during generation", self.target_calls),
                one("edgespec_draft_acceptance_ratio", "gauge",
                    "Draft tokens accepted / drafted, since the start",
                    self.accepted / self.drafted if self.drafted else 0.0),
                one("edgespec_tokens_per_target_call", "gauge",
                    "Generated tokens per target verify call, since the start",
                    self.generated / self.target_calls if self.target_calls else 0.0),
                Metric("edgespec_http_requests_total", "counter",
                       "HTTP requests answered, by route and status code",
                       tuple(({"route": r, "code": c}, n)
                             for (r, c), n in sorted(self.requests.items()))),
            ]  # fmt: skip
        return out
