"""edgespec's terminal chat app (Textual): speculative decoding shown token by token.

Depends on edgespec's public API only; edgespec never imports this package. The
``edgespec chat`` subcommand is plugged in through the ``edgespec.commands``
entry-point group (see ``tui.command``).
"""
