"""Probe edgespec with hostile inputs and count how it fails (issue 16).

Usage::

    .venv/bin/python scripts/probe_bad_input.py [--skip-http]

Classes: broken model files, malformed state (calibration cache, conversations,
kills mid-write), bad catalogs, hostile HTTP against ``edgespec serve``. Every
subprocess runs under a timeout (a timeout is a hang). Everything happens in a
temporary directory (models, caches, data) that is removed at the end; the only
network is loopback. Prints a summary table and exits 1 if any input gave a
traceback, an abort (signal), a hang or lost data, or the server answered 5xx,
died or logged a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
TIMEOUT = 60
TB = "Traceback (most recent call last)"


def edgespec_cmd() -> list[str]:
    exe = Path(PY).parent / "edgespec"
    return [str(exe)] if exe.exists() else [PY, "-m", "edgespec.cli"]


@dataclass
class Outcome:
    kind: str  # ok, oneline, multiline, traceback, abort, hang
    rc: int | None
    stderr: str
    stdout: str = ""


@dataclass
class ClassStats:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    tried: int = 0
    data_lost: int = 0
    bad: list[tuple[str, str, str]] = field(default_factory=list)  # input, kind, stderr head
    notes: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, label: str, out: Outcome) -> None:
        self.tried += 1
        self.counts[out.kind] = self.counts.get(out.kind, 0) + 1
        if out.kind in ("traceback", "abort", "hang"):
            self.bad.append((label, out.kind, head(out.stderr)))

    def lost(self, label: str, why: str) -> None:
        self.data_lost += 1
        self.bad.append((label, "data lost", why))


def head(text: str, n: int = 4) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if TB in text:  # the traceback's last lines say what it was
        return " | ".join(lines[:1] + ["..."] + lines[-3:])
    return " | ".join(lines[:n])[:600]


def classify(rc: int | None, stderr: str) -> Outcome:
    if rc is None:
        return Outcome("hang", rc, stderr)
    if rc < 0:
        return Outcome("abort", rc, stderr)
    if TB in stderr:
        return Outcome("traceback", rc, stderr)
    if rc == 0:
        return Outcome("ok", rc, stderr)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if lines and all(ln.startswith("edgespec:") for ln in lines):  # progress + the error
        return Outcome("oneline", rc, stderr)
    return Outcome("multiline", rc, stderr)


def run(cmd: list[str], env: dict[str, str], timeout: float = TIMEOUT, stdin=None) -> Outcome:
    p = subprocess.Popen(
        cmd,
        env=env,
        cwd=REPO,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        so, err = p.communicate(timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        so, err = p.communicate()
        rc = None
    out = classify(rc, err.decode("utf-8", "replace"))
    out.stdout = so.decode("utf-8", "replace")
    return out


# ------------------------------------------------------------------ setup


def load_maker():
    spec = importlib.util.spec_from_file_location("make_test_models", HERE / "make_test_models.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["make_test_models"] = mod
    spec.loader.exec_module(mod)
    return mod


def base_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("EDGESPEC_"):
            del env[k]
    env.update(
        EDGESPEC_MODELS_DIR=str(tmp / "models"),
        EDGESPEC_CACHE_DIR=str(tmp / "cache"),
        EDGESPEC_DATA_DIR=str(tmp / "data"),
        XDG_CACHE_HOME=str(tmp / "xdg-cache"),
        XDG_DATA_HOME=str(tmp / "xdg-data"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
        HOME=str(tmp / "home"),
        HF_HOME=str(tmp / "hf"),
        HF_ENDPOINT="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        PYTHONDONTWRITEBYTECODE="1",
    )
    for d in ("models", "cache", "data", "home"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    return env


# ------------------------------------------------------------------ 1. model files


def gguf_data_offset(path: Path) -> int:
    import gguf

    return int(gguf.GGUFReader(str(path)).data_offset)


def broken_models(tmp: Path, target: Path, maker) -> list[tuple[str, str, bytes | None]]:
    """(label, path, stdin bytes or None) for each broken model input."""
    d = tmp / "broken"
    d.mkdir()
    good = target.read_bytes()
    size = len(good)
    data_off = gguf_data_offset(target)
    out: list[tuple[str, str, bytes | None]] = []

    def put(label: str, data: bytes) -> None:
        p = d / f"{len(out):03d}.gguf"
        p.write_bytes(data)
        out.append((label, str(p), None))

    cuts = [1, 3, 4, 7, 8, 12, 16, 23, 24, 31, 40, 64, 200, 1000]
    cuts += [int(data_off * f) for f in (0.25, 0.5, 0.75, 0.9, 0.97)]
    cuts += [data_off - 1, data_off, data_off + 1, data_off + 100]
    cuts += [data_off + (size - data_off) // 2, size - 4096, size - 1]
    for c in sorted(set(cuts)):
        put(f"truncated at {c}/{size}", good[:c])
    rng = random.Random(16)
    for _ in range(14):
        pos = rng.randrange(4, data_off)
        b = bytearray(good)
        b[pos] ^= 0xFF
        put(f"byte flip at {pos} (header/metadata)", bytes(b))
    for _ in range(2):
        pos = rng.randrange(data_off, size)
        b = bytearray(good)
        b[pos] ^= 0xFF
        put(f"byte flip at {pos} (tensor data)", bytes(b))
    put("wrong magic GGUX", b"GGUX" + good[4:])
    put("wrong magic GGML", b"lmgg" + good[4:])
    for v in (0, 1, 2, 4, 0xFFFFFFFF):
        put(f"version {v}", good[:4] + struct.pack("<I", v) + good[8:])
    for name, off in (("n_tensors", 8), ("n_kv", 16)):
        for v in (0, 10**6, 2**62, 2**64 - 1):
            put(f"{name}={v}", good[:off] + struct.pack("<Q", v) + good[off + 8 :])
    put("first key length 2^62", good[:24] + struct.pack("<Q", 2**62) + good[32:])
    put("first key length 0", good[:24] + struct.pack("<Q", 0) + good[32:])
    put("text file", b"hello, this is not a model\n")
    put("all zeros", bytes(size))
    put("random bytes", rng.randbytes(size))
    put("GGUF header only", good[:24])
    put("empty file", b"")
    nob = maker.write_without_byte_tokens(d / "no_byte_tokens.gguf")
    out.append(("SPM vocab without byte tokens (prompt hi)", str(nob), None))
    out.append(("SPM vocab without byte tokens (prompt 語)", str(nob) + "\0語", None))
    (d / "a_directory.gguf").mkdir()
    out.append(("a directory", str(d / "a_directory.gguf"), None))
    os.mkfifo(d / "fifo.gguf")
    out.append(("a FIFO without writer", str(d / "fifo.gguf"), None))
    out.append(("/proc/self/mem", "/proc/self/mem", None))
    out.append(("/dev/null", "/dev/null", None))
    out.append(("/dev/zero", "/dev/zero", None))
    out.append(("/dev/stdin pipe (open, no data)", "/dev/stdin", b""))
    out.append(("/dev/fd/0 pipe with garbage", "/dev/fd/0", b"GGUF" + b"\0" * 64))
    os.symlink(d / "loop_b.gguf", d / "loop_a.gguf")
    os.symlink(d / "loop_a.gguf", d / "loop_b.gguf")
    out.append(("symlink loop", str(d / "loop_a.gguf"), None))
    os.symlink(d / "nowhere.gguf", d / "dangling.gguf")
    out.append(("dangling symlink", str(d / "dangling.gguf"), None))
    out.append(("nonexistent path", str(d / "does_not_exist.gguf"), None))
    unread = d / "unreadable.gguf"
    unread.write_bytes(good)
    unread.chmod(0)
    out.append(("mode 000 file (root may read it)", str(unread), None))
    out.append(("path with NUL? (newline in name)", str(d / "new\nline.gguf"), None))
    return out


def probe_models(tmp: Path, env: dict[str, str], target: Path, maker) -> ClassStats:
    st = ClassStats("1 model files")
    base = edgespec_cmd()
    out = run(
        base
        + ["generate", "--target", str(target), "--prompt", "hi"]
        + ["--max-tokens", "4", "--threads", "1"],
        env,
    )
    if out.kind != "ok":
        print(f"baseline generate on the good model is not ok: {out.kind}: {head(out.stderr)}")
    for label, path, stdin in broken_models(tmp, target, maker):
        prompt = "hi"
        if "\0" in path:
            path, prompt = path.split("\0")
        cmd = base + ["generate", "--target", path, "--prompt", prompt]
        cmd += ["--max-tokens", "4", "--threads", "1"]
        if stdin is not None:
            p = subprocess.Popen(
                cmd,
                env=env,
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            try:
                _, err = p.communicate(stdin, timeout=TIMEOUT)
                rc: int | None = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                _, err = p.communicate()
                rc = None
            out = classify(rc, err.decode("utf-8", "replace"))
        else:
            out = run(cmd, env)
        st.add(label, out)
        if out.kind in ("ok", "multiline"):
            st.notes.append((label, out.kind, head(out.stderr)))
    # the same broken files as a model directory: edgespec models lists local files
    mdir = tmp / "models_broken"
    shutil.copytree(tmp / "broken", mdir, symlinks=True, ignore=lambda *_: ["fifo.gguf"])
    os.mkfifo(mdir / "fifo.gguf")
    env2 = dict(env, EDGESPEC_MODELS_DIR=str(mdir))
    out = run(base + ["models"], env2)
    st.add("edgespec models over a directory of broken files", out)
    if out.kind == "multiline":
        st.notes.append(("edgespec models over broken dir", out.kind, head(out.stderr)))
    return st


# ------------------------------------------------------------------ 2. state


CACHE_CASES: list[tuple[str, object]] = [
    ("deep nesting 100000 '['", b"[" * 100_000),
    ("deep nesting 100000 '{\"a\":'", b'{"a":' * 100_000),
    ("invalid UTF-8", b'\xff\xfe{"x": \xc3\x28}'),
    ("truncated JSON", b'{"target.gguf|1": {"seconds": [0.1, '),
    ("JSON list", b"[1, 2, 3]"),
    ("JSON null", b"null"),
    ("JSON string", b'"calibration"'),
    ("entry wrong shape", b'{"k": 5, "k2": [1], "k3": {"seconds": "fast"}}'),
    ("entry seconds NaN/neg", b'{"k": {"seconds": [NaN, -1, 1e999], "version": 2}}'),
    ("empty file", b""),
    ("NUL bytes", b"\0" * 4096),
    ("an empty directory", "dir"),
    ("a non-empty directory (kept: not edgespec's to delete)", "fulldir"),
    ("a FIFO", "fifo"),
    ("dangling symlink", "dangling"),
]


def cache_entries(path: Path) -> dict | None:
    """The cache file's JSON object, or None (never opens a FIFO: that would block)."""
    try:
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def probe_state(tmp: Path, env: dict[str, str], target: Path, draft: Path) -> ClassStats:
    st = ClassStats("2 malformed state")
    base = edgespec_cmd()
    calib = base + ["calibrate", "--target", str(target), "--draft", str(draft)]
    calib += ["--threads", "1", "--json"]
    gen = base + ["generate", "--target", str(target), "--draft", str(draft), "--prompt", "hi"]
    gen += ["--max-tokens", "4", "--threads", "1", "--gamma", "auto"]
    for i, (label, content) in enumerate(CACHE_CASES):
        cdir = tmp / f"cache{i}"
        cdir.mkdir()
        cfile = cdir / "calibration.json"
        if content in ("dir", "fulldir"):
            cfile.mkdir()
            if content == "fulldir":
                (cfile / "x").write_text("x")
        elif content == "fifo":
            os.mkfifo(cfile)
        elif content == "dangling":
            os.symlink(cdir / "nowhere", cfile)
        else:
            assert isinstance(content, bytes)
            cfile.write_bytes(content)
        e = dict(env, EDGESPEC_CACHE_DIR=str(cdir))
        for what, cmd in (("calibrate", calib), ("generate --gamma auto", gen)):
            out = run(cmd, e)
            lab = f"cache {label}: {what}"
            st.add(lab, out)
            if out.kind != "ok":
                st.notes.append((lab, out.kind, head(out.stderr)))
        # a curve measured while the machine is busy (noisy) is not cached by design:
        # calibrate again a few times before calling the cache lost
        noisy = False
        for _ in range(4):
            if cache_entries(cfile):
                break
            again = run(calib[:-1], e)  # without --json: it says when a curve is not cached
            noisy = "not cached" in again.stdout + again.stderr
        if not cache_entries(cfile):
            if noisy:
                st.notes.append((f"cache {label}", "not rebuilt", "busy machine: not cached"))
            elif content == "fulldir":
                st.notes.append((f"cache {label}", "not replaced", "directory left in place"))
            else:
                st.lost(f"cache {label}", "not rebuilt as a readable JSON object with entries")

    # kills: SIGKILL a refreshing calibration at various moments; the cache must stay
    # readable and keep the other model's curve
    kdir = tmp / "cache_kill"
    kdir.mkdir()
    e = dict(env, EDGESPEC_CACHE_DIR=str(kdir))
    other = base + ["calibrate", "--target", str(draft), "--threads", "1", "--json"]
    for _ in range(5):  # a noisy (busy machine) curve is not cached: try again
        out = run(other, e)
        before = cache_entries(kdir / "calibration.json") or {}
        if before:
            break
    if out.kind != "ok" or not before:
        st.add("kill setup: calibrate the other model", out)
        st.notes.append(("kill setup", "no cached curve to lose", head(out.stderr)))
    for delay in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.2):
        p = subprocess.Popen(
            calib + ["--refresh"],
            env=e,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        st.tried += 1
        st.counts["killed"] = st.counts.get("killed", 0) + 1
        cpath = kdir / "calibration.json"
        now = cache_entries(cpath)
        if (now is None and (before or os.path.lexists(cpath))) or any(
            k not in (now or {}) for k in before
        ):
            st.lost(f"SIGKILL calibrate --refresh after {delay}s", f"cache now {now!r:.200}")
    out = run(calib, e)
    st.add("calibrate after the kills", out)
    leftovers = [p.name for p in kdir.iterdir() if p.name not in ("calibration.json",)]
    if leftovers:
        st.notes.append(("after kills", "leftover files", ", ".join(sorted(leftovers))))

    probe_conversations(tmp, env, st)
    return st


CONV_SCRIPT = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tui import store
s = store.ConversationStore(Path(sys.argv[1]))
convs, skipped = s.scan()
others = 0
for p in s.dir.iterdir():
    if p.suffix != ".json":
        continue
    try:
        s.load(p.stem)
    except (OSError, ValueError):
        pass
print(len(convs), skipped)
"""

CONV_CASES: list[tuple[str, object]] = [
    ("deep nesting 100000 '['", b"[" * 100_000),
    ("deep nesting objects", b'{"messages":' * 100_000),
    ("invalid UTF-8", b'{"id": "\xff\xfe"}'),
    ("empty file", b""),
    ("JSON null", b"null"),
    ("JSON list", b"[]"),
    ("JSON number", b"5"),
    ("id is a number", b'{"id": 5, "messages": []}'),
    ("messages a string", b'{"id": "x", "messages": "hello"}'),
    ("message a number", b'{"id": "x", "messages": [5]}'),
    ("message role list", b'{"id": "x", "messages": [{"role": [], "content": {}}]}'),
    ("updated a dict", b'{"id": "x", "messages": [], "updated": {}, "title": 7}'),
    ("huge number", b'{"id": "x", "messages": [], "updated": 1' + b"0" * 5000 + b"}"),
    ("NUL bytes", b"\0" * 100),
    ("a directory", "dir"),
    ("a FIFO", "fifo"),
    ("symlink loop", "loop"),
]


def probe_conversations(tmp: Path, env: dict[str, str], st: ClassStats) -> None:
    sys.path.insert(0, str(REPO))
    try:
        from tui import store
    except Exception as exc:  # noqa: BLE001
        st.notes.append(("conversations", "skipped", f"cannot import tui.store: {exc!r}"))
        return
    finally:
        sys.path.pop(0)
    for i, (label, content) in enumerate(CONV_CASES):
        root = tmp / f"conv{i}"
        s = store.ConversationStore(root)
        conv = store.Conversation(id=store.new_id(), messages=[]) if _conv_ok(store) else None
        if conv is None:
            st.notes.append(("conversations", "skipped", "cannot build a Conversation"))
            return
        s.save(conv)
        bad = s.dir / "bad.json"
        if content == "dir":
            bad.mkdir()
        elif content == "fifo":
            os.mkfifo(bad)
        elif content == "loop":
            os.symlink(s.dir / "loop2.json", bad)
            os.symlink(bad, s.dir / "loop2.json")
        else:
            assert isinstance(content, bytes)
            bad.write_bytes(content)
        out = run([PY, "-c", CONV_SCRIPT, str(root), str(REPO)], env, timeout=30)
        lab = f"conversation file: {label}"
        st.add(lab, out)
        want = ["1", "2"] if content == "loop" else ["1", "1"]  # loop: both links skipped
        if out.kind == "ok" and out.stdout.split() != want:
            st.notes.append((lab, "scan (loaded, skipped) not (1, 1)", out.stdout.strip()))
        if not (root / "conversations" / f"{conv.id}.json").exists():
            st.lost(lab, "the good conversation file is gone")


def _conv_ok(store) -> bool:
    try:
        store.Conversation(id=store.new_id(), messages=[])
    except Exception:  # noqa: BLE001
        return False
    return True


# ------------------------------------------------------------------ 3. catalog


GOOD_ENTRY = """
[models."probe-model"]
description = "probe"
family = "llama"
tokenizer = "probe"
params = "1M"
quantization = "F32"
file = "{file}"
context_length = 1024
chat_template = false
license = "mit"
sha256 = ""
sources = [ {{ type = "hf", repo = "{repo}", filename = "{filename}", revision = "main" }} ]
"""


def catalog_cases() -> list[tuple[str, object]]:
    def entry(file="probe.gguf", repo="owner/probe-GGUF", filename="probe.gguf") -> str:
        return "schema = 1\n" + GOOD_ENTRY.format(file=file, repo=repo, filename=filename)

    good = entry()
    return [
        ("valid catalog (pull: no network)", good),
        ("repo with a space", entry(repo="bartowski/gemma 3-GGUF")),
        ("repo with --", entry(repo="org/repo--x")),
        ("repo ../..", entry(repo="../..")),
        ("repo with no slash", entry(repo="justname")),
        ("repo a/b/c", entry(repo="a/b/c")),
        ("repo 200 chars", entry(repo="o/" + "r" * 200)),
        ("file with NUL", entry(file="a\\u0000b.gguf")),
        ("file ../escape", entry(file="../../escape.gguf")),
        ("file absolute", entry(file="/etc/passwd")),
        ("file empty", entry(file="")),
        ("filename with NUL", entry(filename="x\\u0000.gguf")),
        ("filename ..", entry(filename="../x.gguf")),
        ("filename newline", entry(filename="x\\n.gguf")),
        ("missing file field", good.replace('file = "probe.gguf"\n', "")),
        ("missing sources", good.split("sources")[0]),
        ("sources a string", good.split("sources")[0] + 'sources = "hf"\n'),
        ("sources empty", good.split("sources")[0] + "sources = []\n"),
        ("source type ftp", good.replace('type = "hf"', 'type = "ftp"')),
        ("size negative", good.replace("license", "size = -5\nlicense")),
        ("size a string", good.replace("license", 'size = "big"\nlicense')),
        ("sha256 not hex", good.replace('sha256 = ""', 'sha256 = "zz"')),
        ("context_length string", good.replace("context_length = 1024", 'context_length = "x"')),
        ("models a list", "schema = 1\nmodels = [1, 2]\n"),
        ("schema 99", good.replace("schema = 1", "schema = 99")),
        ("no schema", good.replace("schema = 1", "")),
        ("not TOML", "this is { not toml"),
        ("empty file", ""),
        ("invalid UTF-8", b"schema = 1\n# \xff\xfe\n"),
        ("deep nesting", "a = " + "[" * 100_000),
        ("deep inline tables", "a = " + "{b = " * 10_000),
        ("NUL bytes", b"\0" * 100),
        ("a directory", "dir"),
        ("a FIFO", "fifo"),
        ("nonexistent", "missing"),
    ]


def probe_catalog(tmp: Path, env: dict[str, str]) -> ClassStats:
    st = ClassStats("3 catalog")
    base = edgespec_cmd()
    cd = tmp / "catalogs"
    cd.mkdir()
    for i, (label, content) in enumerate(catalog_cases()):
        path = cd / f"c{i}.toml"
        if content == "dir":
            path.mkdir()
        elif content == "fifo":
            os.mkfifo(path)
        elif content == "missing":
            pass
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            assert isinstance(content, str)
            path.write_text(content, encoding="utf-8")
        e = dict(env, EDGESPEC_CATALOG=str(path))
        for what, cmd in (("models", ["models"]), ("pull", ["pull", "probe-model"])):
            out = run(base + cmd, e)
            lab = f"catalog {label}: {what}"
            st.add(lab, out)
            if out.kind == "multiline" or (out.kind == "ok" and what == "pull"):
                st.notes.append((lab, out.kind, head(out.stderr)))
    return st


# ------------------------------------------------------------------ 4. HTTP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send(port: int, raw: bytes, half_close: bool = True, timeout: float = 30) -> int | None:
    """Send raw bytes; the status code, 0 if closed without one, None on timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        buf = b""
        try:
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            return None
        except OSError:
            return 0
    try:
        return int(buf.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def req(method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    h = {"Host": "127.0.0.1", "Connection": "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in h.items() if v is not None]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")


def js(obj) -> bytes:
    return json.dumps(obj).encode()


def http_cases() -> list[tuple[str, bytes, bool]]:
    """(label, raw request, half-close after sending)."""
    c: list[tuple[str, bytes, bool]] = []

    def add(label, raw, half=True):
        c.append((label, raw, half))

    for m in ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "POST", "TRACE", "BREW"):
        for path in ("/health", "/v1/models", "/v1/completions"):
            add(f"{m} {path}", req(m, path, b"" if m in ("POST", "PUT", "PATCH") else None))
    for path in (
        "/",
        "/v1",
        "/v1/completions/",
        "/../../etc/passwd",
        "/%00",
        "/v1/models?x=1",
        "/" + "a" * 8000,
        "/" + "a" * 100_000,
        "*",
    ):
        add(f"GET {path[:40]}", req("GET", path))
    comp = "/v1/completions"
    for label, body in (
        ("empty body", b""),
        ("{", b"{"),
        ("nul", b"nul"),
        ("[]", b"[]"),
        ("null", b"null"),
        ("1", b"1"),
        ('"x"', b'"x"'),
        ("invalid UTF-8", b'{"prompt": "\xff\xfe"}'),
        ("lone surrogate", b'{"prompt": "\\ud800"}'),
        ("BOM", b'\xef\xbb\xbf{"prompt": "hi", "max_tokens": 2}'),
        ("deep nesting [", b"[" * 100_000),
        ("deep nesting in prompt", b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("NaN", b'{"prompt": "hi", "temperature": NaN, "max_tokens": 2}'),
        ("Infinity", b'{"prompt": "hi", "top_p": Infinity, "max_tokens": 2}'),
        ("duplicate keys", b'{"prompt": "hi", "prompt": 5, "max_tokens": 2}'),
        ("huge int", b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}"),
        ("valid", js({"prompt": "hi", "max_tokens": 2})),
    ):
        add(f"POST {comp} {label}", req("POST", comp, body))
    bad_values = [None, "x", -1, 1e308, 2**70, [], {}, True, [1, "a"]]
    fields = [
        "prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stream",
        "n",
        "logprobs",
        "echo",
        "model",
        "suffix",
        "presence_penalty",
        "frequency_penalty",
        "stream_options",
        "logit_bias",
    ]
    rng = random.Random(7)
    for f in fields:
        for v in rng.sample(bad_values, 3):
            body = {"prompt": "hi", "max_tokens": 2}
            body[f] = v
            add(f"POST {comp} {f}={v!r}"[:80], req("POST", comp, js(body)))
    chat = "/v1/chat/completions"
    for label, msgs in (
        ("messages string", "hi"),
        ("messages empty", []),
        ("message number", [5]),
        ("role number", [{"role": 5, "content": "hi"}]),
        ("role unknown", [{"role": "wizard", "content": "hi"}]),
        ("content list of parts", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
        ("content image part", [{"role": "user", "content": [{"type": "image_url"}]}]),
        ("content dict", [{"role": "user", "content": {"a": 1}}]),
        ("content missing", [{"role": "user"}]),
        ("valid", [{"role": "user", "content": "hi"}]),
    ):
        add(f"POST {chat} {label}", req("POST", chat, js({"messages": msgs, "max_tokens": 2})))
    for label, body in (
        ("prefix number", {"input_prefix": 5}),
        ("extra list of strings", {"input_prefix": "a", "input_extra": ["x"]}),
        ("extra bad dicts", {"input_prefix": "a", "input_extra": [{"filename": 5, "text": []}]}),
        ("valid", {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 2}),
    ):
        add(f"POST /infill {label}", req("POST", "/infill", js(body)))
    short = js({"prompt": "hi"})
    for label, cl in (
        ("huge", "1000000000000"),
        ("over max-body", "4194305"),
        ("negative", "-5"),
        ("not a number", "abc"),
        ("hex", "0x10"),
        ("too long by 10", str(len(short) + 10)),
    ):
        add(f"Content-Length {label}", req("POST", comp, short, {"Content-Length": cl}))
    add(
        "Content-Length huge, client keeps connection open",
        req("POST", comp, short, {"Content-Length": "1000000"}),
        False,
    )
    add(
        "two Content-Length",
        req("POST", comp, short).replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n", 1),
    )
    add("no Content-Length", req("POST", comp, short, {"Content-Length": None}))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(short), short)
    add("chunked body", req("POST", comp, None, {"Transfer-Encoding": "chunked"}) + chunked)
    add(
        "bad chunked body",
        req("POST", comp, None, {"Transfer-Encoding": "chunked"}) + b"zz\r\nxx\r\n",
    )
    add("Content-Type text/plain", req("POST", comp, short, {"Content-Type": "text/plain"}))
    add("garbage request line", b"\x00\xff\xfe garbage\r\n\r\n")
    add("no HTTP version", b"GET /health\r\n\r\n")
    add("HTTP/0.9 style", b"GET /health\n")
    add("HTTP/9.9", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n")
    add("header line 100 KB", req("GET", "/health", None, {"X-Big": "a" * 100_000}))
    add("2000 headers", req("GET", "/health", None, {f"X-H{i}": "1" for i in range(2000)}))
    add(
        "non-latin1 header bytes",
        req("GET", "/v1/models").replace(b"\r\n\r\n", b"\r\nX-U: \xff\xfe\xc3\r\n\r\n", 1),
    )
    add("empty request", b"")
    add("only CRLF", b"\r\n\r\n")
    add("valid, not half-closed", req("POST", comp, js({"prompt": "hi", "max_tokens": 2})), False)
    return c


def auth_cases(key: str) -> list[tuple[str, bytes, bool, int]]:
    comp = "/v1/completions"
    body = js({"prompt": "hi", "max_tokens": 2})
    return [
        ("no key: /health", req("GET", "/health"), True, 2),
        ("no key: HEAD /health", req("HEAD", "/health"), True, 2),
        ("no key: /v1/models", req("GET", "/v1/models"), True, 4),
        ("no key: POST", req("POST", comp, body), True, 4),
        ("wrong key", req("POST", comp, body, {"Authorization": "Bearer nope"}), True, 4),
        ("wrong X-Api-Key", req("POST", comp, body, {"X-Api-Key": "nope"}), True, 4),
        ("empty bearer", req("POST", comp, body, {"Authorization": "Bearer "}), True, 4),
        ("Basic scheme", req("POST", comp, body, {"Authorization": "Basic " + key}), True, 4),
        ("key prefix", req("POST", comp, body, {"Authorization": "Bearer " + key[:-1]}), True, 4),
        ("key + suffix", req("POST", comp, body, {"Authorization": f"Bearer {key}x"}), True, 4),
        (
            "non-ASCII key bytes",
            req("POST", comp, body).replace(
                b"\r\n\r\n", b"\r\nAuthorization: Bearer \xff\xc3\xa9\r\n\r\n", 1
            ),
            True,
            4,
        ),
        (
            "no key, huge body never sent",
            req("POST", comp, b"{", {"Content-Length": "100000000"}),
            False,
            4,
        ),
        ("right key", req("POST", comp, body, {"Authorization": "Bearer " + key}), True, 2),
        (
            "right key lower bearer",
            req("POST", comp, body, {"Authorization": "bearer " + key}),
            True,
            2,
        ),
        ("right X-Api-Key", req("POST", comp, body, {"X-Api-Key": key}), True, 2),
        ("right key: /v1/models", req("GET", "/v1/models", None, {"X-Api-Key": key}), True, 2),
    ]


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path


def start_server(tmp: Path, env: dict[str, str], target: Path, tag: str, extra: list[str]):
    port = free_port()
    log = tmp / f"server-{tag}.log"
    cmd = edgespec_cmd() + ["serve", "--target", str(target), "--threads", "1"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--ctx", "256"] + extra
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=f,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if send(port, req("GET", "/health"), timeout=2) == 200:
                return Server(proc, port, log)
        except OSError:
            pass
        time.sleep(0.2)
    return Server(proc, port, log) if proc.poll() is None else None


def stop_server(srv: Server) -> None:
    if srv.proc.poll() is None:
        os.killpg(srv.proc.pid, signal.SIGTERM)
        try:
            srv.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait()


def probe_slow_body(port: int, raw: bytes, st: ClassStats, tally, label: str) -> None:
    """A client that announces a big body and never sends it: the server may wait for
    it, but must go on answering other clients meanwhile."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        time.sleep(0.5)
        code = send(port, req("GET", "/health"), timeout=30)
        tally(label + ": another client's /health meanwhile", code, 2)
        s.settimeout(10)
        try:
            got = s.recv(100)
        except OSError:
            got = None
        st.notes.append((label, "slow client", f"after 10 s the server sent {got!r:.60}"))


def stream_then_close(port: int, path: str, body: dict) -> None:
    raw = req("POST", path, js(body))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        s.recv(200)
    # closed after the first bytes


def probe_http(tmp: Path, env: dict[str, str], target: Path) -> tuple[ClassStats, dict]:
    st = ClassStats("4 HTTP")
    classes: dict[str, int] = {}
    info: dict = {"classes": classes, "fivexx": [], "alive": {}, "server_tracebacks": {}}
    srv = start_server(tmp, env, target, "open", [])
    if srv is None:
        st.add("serve start", Outcome("abort", None, "server did not come up"))
        return st, info

    def tally(label: str, code: int | None, expect_class: int | None = None) -> None:
        st.tried += 1
        if code is None:
            k = "hang"
        elif code == 0:
            k = "no response"
        else:
            k = f"{code // 100}xx"
        classes[k] = classes.get(k, 0) + 1
        if code is None:
            st.counts["hang"] = st.counts.get("hang", 0) + 1
            st.bad.append((label, "hang", "no response within 30 s"))
        elif code in (501, 505):  # unknown method / HTTP version: the protocol's answer
            st.counts["answered"] = st.counts.get("answered", 0) + 1
            st.notes.append((label, "status", str(code)))
        elif code and code >= 500:
            st.counts["5xx"] = st.counts.get("5xx", 0) + 1
            info["fivexx"].append((label, code))
            st.bad.append((label, f"status {code}", ""))
        else:
            st.counts["answered" if code else "closed"] = (
                st.counts.get("answered" if code else "closed", 0) + 1
            )
            if expect_class is not None and (code // 100) != expect_class:
                st.notes.append((label, "unexpected status", str(code)))

    try:
        for label, raw, half in http_cases():
            if label.startswith("Content-Length huge, client keeps"):
                probe_slow_body(srv.port, raw, st, tally, label)
                continue
            try:
                code = send(srv.port, raw, half_close=half, timeout=30)
            except OSError as exc:
                code = 0
                st.notes.append((label, "connect error", repr(exc)))
            tally(label, code)
        for i in range(3):
            for path, body in (
                ("/v1/completions", {"prompt": "hi", "max_tokens": 200, "stream": True}),
                (
                    "/v1/chat/completions",
                    {
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 200,
                        "stream": True,
                    },
                ),
                ("/infill", {"input_prefix": "a", "n_predict": 200, "stream": True}),
            ):
                lab = f"stream then disconnect {path} #{i}"
                try:
                    stream_then_close(srv.port, path, body)
                    code = send(srv.port, req("GET", "/health"), timeout=30)
                except OSError:
                    code = 0
                tally(lab + " (then /health)", code, 2)
        code = send(srv.port, req("GET", "/health"), timeout=30)
        info["alive"]["open"] = code == 200 and srv.proc.poll() is None
    finally:
        stop_server(srv)
    info["server_tracebacks"]["open"] = srv.log.read_text("utf-8", "replace")

    key = "probe-key-123"
    srv = start_server(tmp, env, target, "key", ["--api-key", key])
    if srv is None:
        st.add("serve --api-key start", Outcome("abort", None, "server did not come up"))
        return st, info
    try:
        for label, raw, half, want in auth_cases(key):
            try:
                code = send(srv.port, raw, half_close=half, timeout=30)
            except OSError:
                code = 0
            tally("api key: " + label, code, want)
        code = send(srv.port, req("GET", "/health"), timeout=30)
        info["alive"]["key"] = code == 200 and srv.proc.poll() is None
    finally:
        stop_server(srv)
    info["server_tracebacks"]["key"] = srv.log.read_text("utf-8", "replace")
    for tag, bad_key in (("non-ASCII", "kéy"), ("control char", "a\x01b"), ("empty", "")):
        out = run(
            edgespec_cmd()
            + [
                "serve",
                "--target",
                str(target),
                "--threads",
                "1",
                "--port",
                str(free_port()),
                "--api-key",
                bad_key,
            ],
            env,
            timeout=15,
        )
        lab = f"serve --api-key {tag}"
        if out.kind == "hang":  # it started serving: fine for an empty key only
            out = Outcome("ok" if bad_key == "" else "hang", None, "served")
        st.add(lab, out)
    for ctx in ("1", "255", "0", "-1", "abc", "999999999999"):
        out = run(
            edgespec_cmd()
            + [
                "serve",
                "--target",
                str(target),
                "--threads",
                "1",
                "--port",
                str(free_port()),
                "--ctx",
                ctx,
            ],
            env,
            timeout=15,
        )
        if out.kind == "hang":  # it started serving: accepted (llama.cpp caps the context)
            st.notes.append((f"serve --ctx {ctx}", "served", "accepted, server started"))
            out = Outcome("ok", None, "served")
        st.add(f"serve --ctx {ctx}", out)
    return st, info


# ------------------------------------------------------------------ main


def main(argv: list[str]) -> int:
    skip_http = "--skip-http" in argv
    t0 = time.monotonic()

    def watchdog(*_):
        raise TimeoutError("probe_bad_input: the whole run took over 15 minutes")

    signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(900)
    tmp = Path(tempfile.mkdtemp(prefix="edgespec-probe-"))
    stats: list[ClassStats] = []
    http_info: dict | None = None
    try:
        env = base_env(tmp)
        maker = load_maker()
        mdir = tmp / "synthetic"
        mdir.mkdir()
        paths = maker.build_test_models(mdir)
        target, draft = paths["target"], paths["draft_noisy"]
        for fn in (
            lambda: probe_models(tmp, env, target, maker),
            lambda: probe_state(tmp, env, target, draft),
            lambda: probe_catalog(tmp, env),
        ):
            t = time.monotonic()
            s = fn()
            print(f"[{s.name}: {s.tried} inputs, {time.monotonic() - t:.0f} s]", flush=True)
            stats.append(s)
        if not skip_http:
            t = time.monotonic()
            s, http_info = probe_http(tmp, env, target)
            print(f"[{s.name}: {s.tried} inputs, {time.monotonic() - t:.0f} s]", flush=True)
            stats.append(s)
    finally:
        for p in tmp.rglob("*"):
            try:
                if not p.is_symlink():
                    p.chmod(0o700)
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)

    cols = ["tried", "ok", "one-line", "multi-line", "traceback", "abort", "hang", "data lost"]
    print()
    print(f"{'class':<20}" + "".join(f"{c:>11}" for c in cols))
    bad_total = 0
    for s in stats:
        c = s.counts
        if s.name.startswith("4"):
            row = [
                s.tried,
                c.get("answered", 0) + c.get("closed", 0),
                0,
                0,
                0,
                0,
                c.get("hang", 0),
                0,
            ]
        else:
            row = [
                s.tried,
                c.get("ok", 0) + c.get("killed", 0),
                c.get("oneline", 0),
                c.get("multiline", 0),
                c.get("traceback", 0),
                c.get("abort", 0),
                c.get("hang", 0),
                s.data_lost,
            ]
        print(f"{s.name:<20}" + "".join(f"{v:>11}" for v in row))
        bad_total += len(s.bad)
    if http_info is not None:
        print()
        print("HTTP responses by class:", dict(sorted(http_info["classes"].items())))
        print("HTTP 5xx:", len(http_info["fivexx"]), http_info["fivexx"][:10])
        for tag, alive in http_info["alive"].items():
            print(f"server ({tag}) alive at the end (GET /health 200): {alive}")
            if not alive:
                bad_total += 1
        for tag, log in http_info["server_tracebacks"].items():
            n = log.count(TB)
            print(f"server ({tag}) stderr tracebacks: {n}")
            if n:
                bad_total += 1
                i = log.index(TB)
                print("   ", log[i : i + 1500].replace("\n", "\n    "))
    print()
    print("state class 'ok' includes SIGKILLed runs (the check is the cache afterwards).")
    print("HTTP class 'ok' = answered with < 500 or closed; hang = no response in 30 s.")
    bads = [(s.name, b) for s in stats for b in s.bad]
    if bads:
        print("\nBAD OUTCOMES (traceback / abort / hang / data lost / 5xx):")
        for name, (label, kind, err) in bads:
            print(f"  [{name}] {label}: {kind}: {err}")
    notes = [(s.name, n) for s in stats for n in (s.notes or [])]
    if notes:
        print(
            "\nNOTES (not failures: ok where an error was expected, multi-line errors, "
            "unexpected statuses):"
        )
        for name, (label, kind, err) in notes:
            print(f"  [{name}] {label}: {kind}: {err[:300]}")
    print(
        f"\ntotal {sum(s.tried for s in stats)} inputs in {time.monotonic() - t0:.0f} s; "
        f"bad outcomes: {bad_total}"
    )
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
