"""Data shipped with edgespec: ``catalog.toml``, the named models and draft/target pairs.

Installed as ``edgespec.models`` (pyproject's package-dir); read it with
:func:`edgespec.modelstore.catalog.load_catalog`. This package holds no code.
"""
