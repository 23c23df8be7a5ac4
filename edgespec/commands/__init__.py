"""Subcommands of the ``edgespec`` CLI, one module each, each with ``register(subparsers)``."""
