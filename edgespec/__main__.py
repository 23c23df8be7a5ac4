"""``python -m edgespec``: the ``edgespec`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
