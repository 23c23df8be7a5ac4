"""The import graph, read from the code: no cycle, and dependencies pointing one way.

Every ``import`` between modules counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the installed name of each top-level folder
PACKAGES = {"edgespec": "edgespec", "tui": "edgespec_tui"}
# the speculative core: free of UI, of the CLI, the server, the benchmark and the model store
CORE_PACKAGES = (
    "edgespec.speculation",
    "edgespec.sampling",
    "edgespec.drafting",
    "edgespec.policy",
)
ABOVE_CORE = (
    "edgespec.cli",
    "edgespec.commands",
    "edgespec.server",
    "edgespec.bench",
    "edgespec.completion",
    "edgespec.modelstore",
    "edgespec.loading",
    "edgespec.tools",
    "edgespec_tui",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = PACKAGES[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for folder in PACKAGES for p in sorted((ROOT / folder).rglob("*.py"))}


def _imported(name: str, path: Path) -> set[str]:
    """Every module name an import statement in ``path`` mentions, made absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = {f"{module}.{alias.name}" for alias in node.names}
            if not names <= MODULES.keys():  # (``from . import costs`` names a submodule)
                out.add(module)
            out.update(names)
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a submodule counts as itself)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for module in _imported(name, path):
            while module and module not in MODULES:
                module = module.rpartition(".")[0]
            if module and module != name:
                deps.add(module)
        graph[name] = deps
    return graph


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read() -> None:
    graph = _graph()
    assert "edgespec.drafting" in graph["edgespec.speculation.loop"]
    assert "edgespec" in graph["edgespec_tui.session"]
    assert "edgespec.api" in graph["edgespec"]


# What code outside edgespec/ (the chat app, the harness, scripts/) may import of
# edgespec: its public API, the names in ``edgespec.__all__``. Nothing below it, not
# even by way of a string of code run in another process. tests/ may import anything.
PUBLIC = ("edgespec",)
OUTSIDE = ("tui", "benchmarks", "scripts")
# an import of a module below edgespec, or ``python -m`` of one, written in a string or a
# document: ``from edgespec.speculation.loop import``, ``import edgespec.cli``, ``-m edgespec.cli``
INTERNAL_IN_TEXT = re.compile(r"(?:\bfrom|\bimport|-m)[\s\"',]+edgespec\.[A-Za-z_]")


def _internal_imports(path: Path) -> set[str]:
    """The modules of edgespec below its public ones that ``path`` imports (a name
    imported from a public module counts when it is a submodule)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = {node.module} | {
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in MODULES  # e.g. from edgespec import engine
            }
        else:
            continue
        out |= {
            m for m in modules if (m == "edgespec" or m.startswith("edgespec.")) and m not in PUBLIC
        }
    return out


def _outside_files() -> list[Path]:
    return [p for folder in OUTSIDE for p in sorted((ROOT / folder).rglob("*")) if p.is_file()
            and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".patch")]  # fmt: skip


def test_only_the_public_api_is_used_outside_edgespec() -> None:
    """The chat app, the harness and scripts/ use the library API (``import edgespec``),
    never an internal module of edgespec: no exceptions."""
    bad = {}
    for path in _outside_files():
        name = path.relative_to(ROOT).as_posix()
        internal = _internal_imports(path) if path.suffix == ".py" else set()
        internal |= set(INTERNAL_IN_TEXT.findall(path.read_text(errors="replace")))
        if internal:
            bad[name] = sorted(internal)
    assert not bad
    # the checker catches an internal import, and one in a string of code
    assert "edgespec.speculation.loop" in _internal_imports(ROOT / "tests" / "test_engine.py")
    assert INTERNAL_IN_TEXT.findall('code = "from edgespec.bench import x"')
    assert INTERNAL_IN_TEXT.findall('[sys.executable, "-m", "edgespec.cli", "serve"]')
    assert not INTERNAL_IN_TEXT.findall('"-m", "edgespec", "serve"; from edgespec import load')


def test_the_docs_examples_use_only_the_public_api() -> None:
    """README's and docs/'s examples import edgespec's public names and run ``python -m
    edgespec``, never a module below it."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    bad = {
        p.relative_to(ROOT).as_posix(): found
        for p in docs
        if (found := INTERNAL_IN_TEXT.findall(p.read_text(encoding="utf-8")))
    }
    assert not bad


def test_the_public_api_names_what_it_exports() -> None:
    """Every name in edgespec's __all__ is importable."""
    import importlib

    for module in PUBLIC:
        mod = importlib.import_module(module)
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert not missing, (module, missing)


def test_no_import_cycle() -> None:
    graph = _graph()
    done: set[str] = set()
    for start in graph:
        path: list[str] = []
        on_path: set[str] = set()
        stack = [(start, iter(sorted(graph[start])))]
        if start in done:
            continue
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif child in on_path:
                cycle = path[path.index(child) :] + [child]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            elif child not in done:
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
                on_path.add(child)


def test_edgespec_never_imports_the_tui() -> None:
    for name, deps in _graph().items():
        if name.startswith("edgespec."):
            assert not [d for d in deps if _under(d, ("edgespec_tui",))], name


def test_the_core_imports_nothing_above_it() -> None:
    for name, deps in _graph().items():
        if _under(name, CORE_PACKAGES):
            above = sorted(d for d in deps if _under(d, ABOVE_CORE))
            assert not above, f"{name} imports {above}"


def test_one_module_touches_llama_cpp() -> None:
    # edgespec.backend.bindings is the one seam to llama-cpp-python; the rest of the
    # backend reaches llama.cpp through it, everything else through edgespec.backend
    files = [*MODULES.values(), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    touching = set()
    for path in files:
        for module in _imported(path.stem, path):
            if module == "llama_cpp" or module.startswith("llama_cpp."):
                touching.add(path.relative_to(ROOT).as_posix())
    assert touching == {"edgespec/backend/bindings.py"}, sorted(touching)


def test_only_the_backend_imports_the_bindings() -> None:
    for name, deps in _graph().items():
        if not _under(name, ("edgespec.backend",)):
            assert "edgespec.backend.bindings" not in deps, name


def test_the_kernel_mode_is_set_before_llama_cpp_loads() -> None:
    # the bindings' first import sets the environment llama.cpp reads at load
    path = ROOT / "edgespec/backend/bindings.py"
    body = ast.parse(path.read_text()).body
    imports = [n for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
    first_llama = next(
        i
        for i, n in enumerate(imports)
        if isinstance(n, ast.Import) and n.names[0].name == "llama_cpp"
    )
    assert any(
        isinstance(n, ast.ImportFrom) and n.module == "kernels" for n in imports[:first_llama]
    )
    kernels = ROOT / "edgespec/backend/kernels.py"
    assert not {m for m in _imported("edgespec.backend.kernels", kernels) if "llama" in m}


def test_the_harness_index_lists_exactly_its_files() -> None:
    """benchmarks/README.md names every file of benchmarks/ (as `name`), and no other."""
    folder = ROOT / "benchmarks"
    index = (folder / "README.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", index, flags=re.MULTILINE))
    present = {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts
    }
    assert listed == present


def test_scripts_holds_only_entry_points() -> None:
    """scripts/: the few commands a user or CI runs, at most 600 lines in all, and the
    patches the bootstrap applies to llama.cpp (scripts/patches: .patch files, a README)."""
    files = [p for p in (ROOT / "scripts").iterdir() if p.is_file()]
    assert sum(len(p.read_text().splitlines()) for p in files) <= 600
    assert [p.name for p in (ROOT / "scripts").iterdir() if p.is_dir()] == ["patches"]
    patches = (ROOT / "scripts" / "patches").iterdir()
    assert all(p.suffix == ".patch" or p.name == "README.md" for p in patches)


def test_every_project_import_names_a_module() -> None:
    """An import of a moved or deleted module (even one inside a function, which runs
    only when called) fails here rather than in front of a user."""
    missing = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    modules = [".".join(base + ([node.module] if node.module else []))]
                else:
                    modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in PACKAGES.values() and module not in MODULES:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {module}")
    assert not missing


def test_no_module_over_400_lines() -> None:
    """Small modules: none in edgespec/, tui/ or the harness over 400 lines."""
    long = {
        str(p.relative_to(ROOT)): n
        for folder in (*PACKAGES, "benchmarks")
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long
