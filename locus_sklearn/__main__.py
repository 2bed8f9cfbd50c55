"""``python -m locus_sklearn``: the command-line interface (``locus``)."""

try:
    from ._cli import main
except KeyboardInterrupt:
    # Ctrl-C while the command's modules load: the one line and status of an
    # interrupted command, not a traceback. (Python imports the package
    # itself before this module runs; an interrupt there is beyond reach.)
    import sys

    print("locus: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    raise SystemExit(main())
