"""llama.cpp's own speculative examples on the same workload (lookup, speculative-simple).

The binaries are the user's to build (their source is in the llama-cpp-python
source package, vendor/llama.cpp; ``cmake --build BUILD --target llama-lookup
llama-speculative-simple``); ``--llama-cpp-bin DIR`` points at them. Each run
gets the workload's prompt verbatim (``-p``; for a chat workload, as the runner
rendered it in the chat template), the same max tokens, temperature,
thread count and context size, and llama.cpp's default window-sized SWA cache as
edgespec uses (or a full-size one: ``--llama-swa full``). The
figures come from what they print at the end: decode tokens/s (prompt excluded),
tokens drafted and accepted. Their peak RSS comes from the kernel (wait4).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .stats import RunRecord
from .workloads import Workload

LOOKUP = "llama-lookup"
SPECULATIVE = "llama-speculative-simple"
RUN_TIMEOUT_S = 900.0

_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+)\s+t/s")
_FIELD = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\d+)")


class LlamaCppError(RuntimeError):
    """A llama.cpp binary failed or printed nothing we could read."""


@dataclass(frozen=True)
class LlamaCppResult:
    """What one llama.cpp run reported."""

    decoded: int
    decode_s: float
    tokens_per_second: float
    n_draft: int
    n_drafted: int
    n_accept: int

    def to_record(self, peak_rss_mib: float) -> RunRecord:
        """As a RunRecord (no per-round data: llama.cpp does not print it)."""
        return RunRecord(
            tokens_per_second=self.tokens_per_second,
            generated=self.decoded,
            drafted=self.n_drafted,
            accepted=self.n_accept,
            decode_s=self.decode_s,
            peak_rss_mib=peak_rss_mib,
        )


def parse_output(text: str) -> LlamaCppResult:
    """Parse the summary llama-lookup / llama-speculative-simple print at the end.

    The fields are read after the ``decoded N tokens in S seconds`` line only (the
    generated text printed before it may contain anything). Raises LlamaCppError if
    that line, n_drafted or n_accept is missing (a summary the log thread lost).
    """
    found = list(_DECODED.finditer(text))
    if not found:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise LlamaCppError(f"no 'decoded ... t/s' line in the output: {tail[:300]}")
    m = found[-1]  # the summary, after any echoed text
    fields: dict[str, int] = {}
    for key, value in _FIELD.findall(text[m.end() :]):
        fields.setdefault(key, int(value))  # the summary's, not a later section's
    missing = [k for k in ("n_drafted", "n_accept") if k not in fields]
    if missing:
        raise LlamaCppError(f"no {' or '.join(missing)} after the 'decoded' line in the output")
    return LlamaCppResult(
        decoded=int(m.group(1)),
        decode_s=float(m.group(2)),
        tokens_per_second=float(m.group(3)),
        n_draft=fields.get("n_draft", 0),
        n_drafted=fields["n_drafted"],
        n_accept=fields["n_accept"],
    )


def find_binaries(bin_dir: Path) -> dict[str, Path]:
    """The llama.cpp speculative binaries present in bin_dir, by name."""
    found = {}
    for name in (LOOKUP, SPECULATIVE):
        path = Path(bin_dir) / name
        if path.is_file() and os.access(path, os.X_OK):
            found[name] = path
    return found


def command(
    binary: Path,
    *,
    target: Path,
    workload: Workload,
    max_tokens: int,
    threads: int,
    n_ctx: int,
    n_draft: int,
    seed: int,
    draft: Path | None = None,
    swa_full: bool = False,
    no_repack: bool = False,
) -> list[str]:
    """The command line for one run (draft is the draft model, for llama-speculative-simple;
    swa_full True asks for a full-size sliding-window cache, --swa-full; no_repack turns
    off weight repacking, --no-repack, which crashes on CPUs with AMX: llama.cpp issue
    20824)."""
    cmd = [
        str(binary),
        "-m", str(target),
        "-p", workload.prompt,
        "-n", str(max_tokens),
        "-t", str(threads),
        "-c", str(n_ctx),
        "-b", str(n_ctx),  # llama-lookup decodes the whole prompt as one batch
        "--temp", str(workload.temperature),
        "-s", str(seed),
        "--spec-draft-n-max", str(n_draft),
    ]  # fmt: skip
    if swa_full:
        cmd.append("--swa-full")
    if no_repack:
        cmd.append("--no-repack")
    if draft is not None:
        cmd += ["-md", str(draft), "--spec-type", "draft-simple", "-td", str(threads)]
    return cmd


def run(
    cmd: list[str], *, timeout_s: float = RUN_TIMEOUT_S, attempts: int = 3
) -> tuple[LlamaCppResult, float]:
    """Run one llama.cpp binary; its parsed summary and its peak RSS in MiB.

    llama.cpp logs from a worker thread that the process does not join at exit;
    on a loaded machine it can fall behind and the summary is lost although the
    run succeeded. Such a run is repeated, up to ``attempts`` times in all.
    """
    for attempt in range(attempts):
        status, text, rss = _run_once(cmd, timeout_s)
        if status != 0:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise LlamaCppError(f"{Path(cmd[0]).name} exited with {status}: {tail[:300]}")
        try:
            return parse_output(text), rss
        except LlamaCppError:
            if attempt + 1 == attempts:
                raise
    raise AssertionError("unreachable")


def _run_once(cmd: list[str], timeout_s: float) -> tuple[int, str, float]:
    """Exit status, combined stdout/stderr and peak RSS (MiB) of one run."""
    env = dict(os.environ)
    lib_dir = str(Path(cmd[0]).parent)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib_dir, env.get("LD_LIBRARY_PATH")) if p)
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        except OSError as e:  # not executable, wrong architecture, ...
            raise LlamaCppError(f"cannot run {cmd[0]}: {e.strerror or e}") from None
        status, rusage = _wait(proc, timeout_s)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return status, text, rusage.ru_maxrss / 1024


def _wait(proc: subprocess.Popen, timeout_s: float) -> tuple[int, resource.struct_rusage]:
    """Reap proc with wait4 (for its own rusage), killing it after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, rusage
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.02)
