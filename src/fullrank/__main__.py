"""``python -m fullrank`` is the same as the ``fullrank`` command."""

from fullrank.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
