"""Subcommands of the ``edgespec`` CLI, one module each, each with ``register(subparsers)``.

A package adds a subcommand through the ``edgespec.commands`` entry-point group (as
the chat app does); the option groups every command shares, and what they turn into,
are what it uses so that its ``--target``, ``--ctx``, ``--temperature``, ... mean what
the built-in commands' do. They are public as ``edgespec``'s names
(``edgespec.add_model_options``, ``edgespec.load_options``, ...: docs/library.md);
this package, like every module below ``edgespec``, is internal.
"""
