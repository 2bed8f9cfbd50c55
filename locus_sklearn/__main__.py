"""The command-line interface (``locus``): ``python -m locus_sklearn``, and the
``locus`` script's entry point."""

import sys


def main(argv=None):
    """Run the ``locus`` command line; see :func:`locus_sklearn._cli.main`.

    The command's modules (pandas and, for most commands, torch: seconds)
    load here, inside a handler: Ctrl-C while they load ends with the one
    line and status 130 of an interrupted command, not a traceback. The
    package's ``__init__`` loads nothing heavy, so Python reaches this handler
    at once.
    """
    try:
        from ._cli import main as run_command_line
    except KeyboardInterrupt:
        print("locus: interrupted", file=sys.stderr)
        return 130  # _cli._errors.EXIT_INTERRUPTED, not importable before _cli
    return run_command_line(argv)


if __name__ == "__main__":
    raise SystemExit(main())
