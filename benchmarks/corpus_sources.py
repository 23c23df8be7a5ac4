"""Where benchmarks/make_corpus.py's texts come from: the Python standard library's
sources, the licence texts and copyright files Debian ships, and section-1 man pages
(troff turned into rough plain text); and how a passage is cut from them. Sources are
tried in a fixed order and a missing one is skipped, so one machine gives one corpus."""

from __future__ import annotations

import ast
import gzip
import re
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

LICENSES = Path("/usr/share/common-licenses")
DOCS = Path("/usr/share/doc")
MAN = Path("/usr/share/man")

# standard-library modules tried first (then every other top-level module, sorted)
MODULES = (
    "textwrap", "shlex", "fnmatch", "glob", "bisect", "heapq", "colorsys", "calendar",
    "difflib", "string", "base64", "csv", "statistics", "fractions", "gettext", "ipaddress",
    "netrc", "pprint", "quopri", "sched", "secrets", "tabnanny", "timeit", "tokenize",
    "uu", "zipapp", "configparser", "copy", "dataclasses", "filecmp", "getopt", "graphlib",
    "imghdr", "mimetypes", "numbers", "operator", "optparse", "plistlib", "random",
    "reprlib", "shutil", "smtplib", "socketserver", "stat", "tempfile", "trace",
    "traceback", "typing", "urllib/parse", "uuid", "wave", "webbrowser", "zipfile",
)  # fmt: skip
# man pages tried first (section 1), then every other one, sorted
MAN_PAGES = (
    "tar", "grep", "find", "sed", "ls", "cp", "gzip", "xargs", "sort", "diff", "make",
    "ssh", "rsync", "curl", "chmod", "date", "du", "df", "ps", "awk", "tee", "head",
)  # fmt: skip


def stdlib_files() -> Iterator[tuple[str, Path, str]]:
    """(module name, path, source) of standard-library modules: the preferred ones first,
    then the other top-level modules in name order; unreadable or unparsable ones skipped."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[Path] = set()
    preferred = [root / f"{m}.py" for m in MODULES]
    rest = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    for path in [*preferred, *rest]:
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            text = path.read_text(encoding="utf-8")
            ast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        yield str(path.relative_to(root).with_suffix("")).replace("/", "."), path, text


def functions(source: str, low: int, high: int) -> list[tuple[str, list[str], str]]:
    """(name, argument names, text) of the functions and methods in source whose text is
    between low and high characters, in source order."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            text = "\n".join(lines[first - 1 : node.end_lineno])
            if low <= len(text) <= high:
                args = [a.arg for a in (*node.args.posonlyargs, *node.args.args,
                                        *node.args.kwonlyargs)]  # fmt: skip
                out.append((node.name, args, _dedent(text), first))
    out.sort(key=lambda f: f[3])
    return [(n, a, t) for n, a, t, _ in out]


def _dedent(text: str) -> str:
    lines = text.splitlines()
    pad = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[pad:] for x in lines)


def licence_texts() -> Iterator[tuple[str, Path, str]]:
    """(short name, path, text) of /usr/share/common-licenses (each file once, links
    followed), then of /usr/share/doc/*/copyright files over 2,000 characters."""
    seen: set[Path] = set()
    if LICENSES.is_dir():
        for path in sorted(LICENSES.iterdir()):
            real = path.resolve()
            if real in seen or not real.is_file():
                continue
            seen.add(real)
            text = _read(path)
            if text:
                yield path.name.lower(), path, text
    for path in sorted(DOCS.glob("*/copyright")) if DOCS.is_dir() else []:
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        text = _read(path)
        if text and len(text) > 2000:
            yield path.parent.name.lower(), path, text


def _read(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    return text.replace("\r\n", "\n").expandtabs(4)


def man_pages() -> Iterator[tuple[str, Path, str]]:
    """(name, path, plain text) of section-1 man pages: the preferred ones, then the rest."""
    folder = MAN / "man1"
    if not folder.is_dir():
        return
    pages = {p.name.split(".")[0]: p for p in sorted(folder.glob("*.1*"))}
    order = [m for m in MAN_PAGES if m in pages] + [m for m in pages if m not in MAN_PAGES]
    for name in order:
        raw = _read(pages[name])
        text = roff_to_text(raw) if raw else ""
        if len(text) > 1500:
            yield name, pages[name], text


_ROFF_ESCAPES = (
    (r"\\f(\[[^]]*\]|\(..|.)", ""), (r"\\\(em|\\\[em\]", "--"), (r"\\\(en|\\\[en\]", "-"),
    (r"\\\((lq|rq|dq)", '"'), (r"\\\(aq|\\\[aq\]", "'"), (r"\\\((bu|\[bu\])", "*"),
    (r"\\[-]", "-"), (r"\\[&|^:%]", ""), (r"\\e", "\\\\"), (r"\\\*\(..|\\\*.", ""),
    (r"\\s[-+]?\d", ""), (r"\\ ", " "), (r"\\\.", "."),
)  # fmt: skip


def roff_to_text(roff: str) -> str:
    """A man page's troff source as rough plain text: section headings kept, other
    requests dropped (their arguments kept), font and character escapes removed."""
    out: list[str] = []
    for line in roff.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\"')) or line.startswith('.\\"'):
            continue
        if line.startswith((".", "'")):
            request, _, rest = line[1:].partition(" ")
            if request in ("SH", "SS"):
                out += ["", rest.strip('"').upper() if request == "SH" else rest.strip('"'), ""]
                continue
            if request in ("PP", "P", "LP", "sp", "br", "TP", "IP"):
                out.append("")
                if request == "IP" and rest:
                    out.append(rest.split('"')[1] if rest.startswith('"') else rest.split()[0])
                continue
            if request in ("B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "UR",
                           "MT", "OP"):  # fmt: skip
                line = " ".join(w.strip('"') for w in rest.split())
            else:
                continue
        for pattern, repl in _ROFF_ESCAPES:
            line = re.sub(pattern, repl, line)
        out.append(line.rstrip())
    # refill each paragraph: requests broke its lines wherever the font changed
    paras = paragraphs("\n".join(out))
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 78) for p in paras)


def paragraphs(text: str) -> list[str]:
    """The blank-line-separated paragraphs of text, stripped, empty ones dropped."""
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


def excerpt(text: str, low: int, high: int, skip: int = 0) -> str | None:
    """Consecutive paragraphs, starting skip paragraphs in, totalling low-high characters."""
    paras = paragraphs(text)
    for start in range(min(skip, max(len(paras) - 1, 0)), len(paras)):
        chosen: list[str] = []
        for p in paras[start:]:
            if sum(len(c) + 2 for c in chosen) + len(p) > high:
                break
            chosen.append(p)
        if sum(len(c) + 2 for c in chosen) >= low:
            return "\n\n".join(chosen)
    return None


def toml_string(text: str) -> str:
    """text as a TOML multi-line basic string (backslashes, quotes and control
    characters escaped), so any source text survives."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch in "\n\t":
            out.append(ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"""\n' + "".join(out) + '"""'
