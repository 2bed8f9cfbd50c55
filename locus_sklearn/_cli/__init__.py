"""The ``locus`` command line (also ``python -m locus_sklearn``).

Subcommands::

    locus demo      [--evals PATH] [--output DIR] [--quick] [--json] ...
    locus fit       EVALS -o ROUTER [--costs FILE] [--epochs N] [--set NAME=VALUE] ...
    locus route     ROUTER QUERY... [--top K] [--cost-weight L] [--models A,B]
    locus embed     ROUTER_OR_EMBEDDER EVALS -o EMBEDDINGS.csv
    locus onboard   ROUTER EVALS [--costs FILE]
    locus select    EMBEDDINGS.csv (--k N | --budget B --costs FILE)
    locus portfolio ROUTER QUERY... --k N
    locus neighbors ROUTER MODEL [--k 5]

Every command takes ``--threads N`` and ``--debug``; those that print results
take ``--json``. Errors are one line on stderr (``locus COMMAND: error: ...``)
with exit status 1 (invalid data or values), 2 (a bad command line) or 3 (a
file that cannot be read or written, stdout included, or a port ``serve``
cannot listen on); ``--debug`` shows the traceback instead, with the same
exit status. An interrupted command (Ctrl-C)
exits with 130; one whose stdout reader went away (``locus route ... |
head``) stops quietly with 141 (128 + SIGPIPE, as shell tools report it).

Modules: ``_parser`` builds the parser, ``_commands`` runs the subcommands,
``_io`` reads and writes files and formats output, ``_demo`` is ``locus
demo``, ``_errors`` maps failures to exit statuses.
"""

import codecs
import contextlib
import errno
import os
import sys
import threading
import traceback
import warnings

from ._errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    exit_status,
    one_line,
)
from ._io import format_table, read_costs, read_encodings
from ._parser import PROG, build_parser

__all__ = [
    "main",
    "run",
    "build_parser",
    "read_costs",
    "read_encodings",
    "format_table",
]


@contextlib.contextmanager
def _threads(n):
    """Run with ``n`` torch threads (None: leave torch's choice), then restore."""
    if n is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def _one_line_warnings(where):
    """Show warnings as one line each, like errors."""

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        print(f"{where}: warning: {text}", file=sys.stderr if file is None else file)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


class _Stdout:
    """``sys.stdout`` while a command runs: a write that fails says that
    stdout was the target (``locus: error: cannot write to stdout: No space
    left on device``, status 3, where Python's error named nothing), and a
    closed stdout (``>&-``, None for Python, where ``print`` writes nothing
    and the results were lost with status 0) fails the first write. A reader
    that closed its pipe (``| head``) is left to :func:`run` (status 141).
    Everything else is the stream's own."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if self.stream is None:
            error = OSError("cannot write to stdout: it is closed")
            error.errno = errno.EBADF
            raise error
        with self._named():
            return self.stream.write(text)

    def flush(self):
        if self.stream is not None:
            with self._named():
                self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)

    @staticmethod
    @contextlib.contextmanager
    def _named():
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as exc:
            error = type(exc)(f"cannot write to stdout: {exc.strerror or exc}")
            error.errno = exc.errno
            raise error from exc


def _encodes_everything(stream):
    """Whether ``stream``'s encoding can write every character (a UTF)."""
    try:
        return codecs.lookup(stream.encoding).name.startswith("utf")
    except (AttributeError, LookupError, TypeError):  # no (known) encoding
        return True  # nothing to change


@contextlib.contextmanager
def _standard_streams():
    """stdout and stderr as the commands expect them, while they run.

    - A closed stderr (``2>&-``; None for Python) becomes os.devnull: notes,
      warnings and errors are dropped, where ``print(file=None)`` wrote them
      into the results on stdout, and ``fit``'s progress stream failed. A
      closed stdin likewise reads as empty.
    - A stdout whose encoding cannot write every character (``LC_ALL=C``
      without UTF-8 mode, ``PYTHONIOENCODING=ascii``) writes the others as
      backslash escapes, as Python's stderr does, where a model named
      "modèle" failed the command half-way through a table (``--json`` is
      ASCII already).
    - Writes to stdout fail naming it (:class:`_Stdout`).
    """
    if isinstance(sys.stdout, _Stdout):  # main(), then run(): set up already
        yield
        return
    streams = sys.stdin, sys.stdout, sys.stderr
    # Left open when restored: what the command set up may still hold them
    # (a logging handler), and the process is about to end.
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    stdout, errors = sys.stdout, None
    if (
        hasattr(stdout, "reconfigure")
        # The handlers that fail on a character the encoding lacks (Python's
        # own in the C locale is surrogateescape), not a user's choice such
        # as PYTHONIOENCODING=ascii:replace.
        and stdout.errors in ("strict", "surrogateescape", "surrogatepass")
        and not _encodes_everything(stdout)
    ):
        errors = stdout.errors
        stdout.reconfigure(errors="backslashreplace")
    sys.stdout = _Stdout(stdout)
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        if errors is not None:
            with contextlib.suppress(OSError, ValueError):
                stdout.reconfigure(errors=errors)


# Set while a command runs, where the caller has not set them: nothing is
# downloaded at run time, whatever a third-party loader (transformers,
# sentence-transformers) would fetch (the package's own loading is local only:
# local_files_only=True); and no "Loading weights" bars when the query encoder
# loads (encoding progress, sentence-transformers' own bar, is still shown by
# fit).
_OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
# Commands run in threads of one process (main() called from Python) share
# os.environ: the first to start sets the variables, the last to end removes
# them, so that none loses them while another still runs.
_ENVIRONMENT_LOCK = threading.Lock()
_environment_users = 0
_environment_added = {}


@contextlib.contextmanager
def _offline_environment():
    """:data:`_OFFLINE_ENVIRONMENT` in ``os.environ`` while a command runs.

    On exit the variables set here are removed; those the caller had keep
    their values (and one changed meanwhile keeps the new value). main() is
    also called from Python, whose later downloads must not fail as
    offline, nor its child processes inherit the setting. huggingface_hub
    reads the variables once, when first imported: a command that imported
    it first leaves it offline in that process.
    """
    global _environment_users, _environment_added
    with _ENVIRONMENT_LOCK:
        if _environment_users == 0:
            _environment_added = {
                key: value
                for key, value in _OFFLINE_ENVIRONMENT.items()
                if key not in os.environ
            }
            os.environ.update(_environment_added)
        _environment_users += 1
    try:
        yield
    finally:
        with _ENVIRONMENT_LOCK:
            _environment_users -= 1
            if _environment_users == 0:
                for key, value in _environment_added.items():
                    if os.environ.get(key) == value:
                        del os.environ[key]
                _environment_added = {}


# The arguments of each command that are text (queries, model names), not
# paths: a path must keep the bytes the OS gave, or it names another file.
_TEXT_ARGUMENTS = {
    "route": ("queries", "models"),
    "portfolio": ("queries",),
    "neighbors": ("model",),
}


def _as_utf8(text):
    """``text``, an argument as Python decoded it (the filesystem encoding,
    with surrogateescape), decoded from its bytes as UTF-8 instead where they
    are UTF-8; otherwise as it is."""
    try:
        return os.fsencode(text).decode("utf-8")
    except UnicodeError:  # not UTF-8, or a str not given by the OS (main(argv))
        return text


def _text_arguments_as_utf8(args):
    """Decode the text arguments of ``args`` (:data:`_TEXT_ARGUMENTS`) as
    UTF-8, as stdin is read (``locus route R -``), where the filesystem
    encoding is not UTF-8 (``LC_ALL=C`` without UTF-8 mode): Python decoded
    them with it, so a query or model name in UTF-8 arrived as lone
    surrogates ("\\udce6\\udc97...") and was not found, while the same
    text on stdin was."""
    if codecs.lookup(sys.getfilesystemencoding()).name == "utf-8":
        return
    for dest in _TEXT_ARGUMENTS.get(getattr(args, "command", None), ()):
        value = getattr(args, dest, None)
        if isinstance(value, str):
            setattr(args, dest, _as_utf8(value))
        elif isinstance(value, list):
            setattr(args, dest, [_as_utf8(v) for v in value])


def main(argv=None):
    """Run the ``locus`` command line.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns
    -------
    status : int
        0 on success; 1 for invalid data or values, 3 for a file that cannot
        be read or written (stdout too) or a port that cannot be opened (each
        reported as one line on stderr, or as a traceback with ``--debug``);
        130 when interrupted; 141 (128 + SIGPIPE, with
        no message) when the reader of stdout closed it early (``locus route
        ... | head``). A bad command line exits with status 2 (from argparse).

    Examples
    --------
    >>> main(["select", "no-such-file.csv", "--k", "2"])
    3
    """
    # The streams around the parse too: --help and --version write to stdout.
    with _offline_environment(), _standard_streams():
        try:  # building the parser imports the optional subcommands' modules
            args = build_parser().parse_args(argv)
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        _text_arguments_as_utf8(args)
        return run(args)


def run(args):
    """Run a parsed command line: its ``func``, with ``--threads`` applied,
    warnings and errors as one line each, and the documented exit status.

    ``python -m locus_sklearn.serve`` runs its commands through this too, so
    they fail exactly as under ``locus``.
    """
    with _standard_streams():
        return _run(args)


def _run(args):
    debug = getattr(args, "debug", False)
    where = f"{PROG} {args.command}"
    try:
        with _one_line_warnings(where), _threads(getattr(args, "threads", None)):
            status = args.func(args)
            # Output still buffered would otherwise meet a closed pipe at
            # exit, outside this handler (a traceback and status 120).
            if sys.stdout is not None:
                sys.stdout.flush()
            return status
    except BrokenPipeError:
        # The reader of stdout went away (``locus route ... | head``): stop
        # quietly with the status of a program SIGPIPE ends (not 1, which
        # says the data was invalid), and keep Python from failing again
        # when it flushes stdout.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"{where}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # every failure is one line, unless --debug
        if debug:
            # The traceback, with the status the error has without --debug:
            # a script that adds --debug for its logs branches the same way.
            traceback.print_exc()
            return exit_status(exc)
        message, status = one_line(exc), exit_status(exc)
        if status == EXIT_USAGE and "--help`" not in message:
            # A bad command line found while running: point to the help,
            # as argparse's own usage errors do.
            message = f"{message.rstrip('.')} (see `{where} --help`)"
        print(f"{where}: error: {message}", file=sys.stderr)
        return status
