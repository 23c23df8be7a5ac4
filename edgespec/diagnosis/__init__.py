"""``edgespec doctor``: what speculation can do on this machine and build, and proof
that it is exact here.

For a target and one or more drafters, in about a minute: the backend and devices,
the kernel mode and patch (``environment``); the target's verify-cost curve summarised
as memory- or compute-bound; on the user's prompts (``prompts``), each drafter's
per-token acceptance and draft cost, the speed-up Leviathan et al.'s formula predicts
from them (``predict``) next to the one timed; a greedy exactness self-test; and a
recommendation with its reason (``verdict``). ``run.doctor`` does it all and returns a
``report.DoctorReport``; the library exports it as ``edgespec.doctor`` and the CLI as
``edgespec doctor`` (docs/doctor.md).
"""

from __future__ import annotations

from .prompts import Prompt, read_prompts
from .report import DoctorReport, DrafterResult, Exactness, Recommendation
from .run import doctor

__all__ = [
    "DoctorReport",
    "DrafterResult",
    "Exactness",
    "Prompt",
    "Recommendation",
    "doctor",
    "read_prompts",
]
