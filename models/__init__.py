"""Data shipped with edgespec: ``catalog.toml``, the named models and draft/target pairs.

Read it with :func:`edgespec.catalog.load_catalog`; this package holds no code.
"""
