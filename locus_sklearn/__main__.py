"""``python -m locus_sklearn``: the command-line interface (``locus``)."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
