"""``python -m dragoman`` is the ``dragoman`` command."""

from dragoman.proxy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
