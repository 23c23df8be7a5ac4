"""Class 3: bad catalogs (EDGESPEC_CATALOG) for ``edgespec models`` and ``pull``."""

from __future__ import annotations

from pathlib import Path

from .common import ClassStats, edgespec_cmd, place, run

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
    no_sources = good.split("sources")[0]
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
        ("missing sources", no_sources),
        ("sources a string", no_sources + 'sources = "hf"\n'),
        ("sources empty", no_sources + "sources = []\n"),
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
    cd = tmp / "catalogs"
    cd.mkdir()
    for i, (label, content) in enumerate(catalog_cases()):
        path = cd / f"c{i}.toml"
        place(path, content)
        e = dict(env, EDGESPEC_CATALOG=str(path))
        for what, cmd in (("models", ["models"]), ("pull", ["pull", "probe-model"])):
            # pull cannot succeed without network: ok there is worth a note
            notable = ("multiline", "ok") if what == "pull" else ("multiline",)
            st.add(f"catalog {label}: {what}", run(edgespec_cmd() + cmd, e), note_kinds=notable)
    return st
