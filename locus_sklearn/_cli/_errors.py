"""Exit statuses of the ``locus`` command and the one-line form of its errors.

Every failure ends the command with one line on stderr and one of these
statuses (documented in ``docs/cli.rst``); ``--debug`` prints the traceback
instead of the line, with the same status.
"""

import contextlib
import signal

__all__ = [
    "EXIT_OK",
    "EXIT_ERROR",
    "EXIT_USAGE",
    "EXIT_IO",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "CommandError",
    "exit_status",
    "interrupts_kept",
    "one_line",
]

EXIT_OK = 0
#: Invalid data or values: bad file contents, unknown models or queries,
#: hyper-parameters out of range, an unavailable device.
EXIT_ERROR = 1
#: A bad command line (argparse's own status).
EXIT_USAGE = 2
#: A file that cannot be read or written: missing, not permitted, disk full
#: (stdout too); or a port ``locus serve`` cannot listen on (in use, not
#: permitted).
EXIT_IO = 3
EXIT_INTERRUPTED = 130
#: The reader of stdout closed it early (``locus route ... | head``): 128 +
#: SIGPIPE (13), the status of a program the signal ends, as shell tools
#: report it; not 1, which would say the data was invalid. Written out, as
#: Windows has no signal.SIGPIPE.
EXIT_BROKEN_PIPE = 141


class CommandError(Exception):
    """An error the command reports as it is, with its exit ``status``.

    Examples
    --------
    >>> exit_status(CommandError("disk full", status=EXIT_IO))
    3
    """

    def __init__(self, message, *, status=EXIT_ERROR):
        super().__init__(message)
        self.status = status


def _is_safetensors_error(exc):
    # safetensors' Rust errors (e.g. a full disk while serialising) derive
    # from Exception only; recognise them by type name so that this module
    # imports nothing heavy.
    return type(exc).__name__ == "SafetensorError"


def exit_status(exc):
    """The exit status for an exception raised by a command.

    Examples
    --------
    >>> exit_status(FileNotFoundError("x")), exit_status(ValueError("x"))
    (3, 1)
    """
    if isinstance(exc, CommandError):
        return exc.status
    if isinstance(exc, OSError) or _is_safetensors_error(exc):
        return EXIT_IO
    return EXIT_ERROR


#: Exceptions whose message is meant for users; anything else is reported
#: with its type name, as it points at a bug rather than at the input.
_EXPECTED = (CommandError, ValueError, TypeError, KeyError, OSError, ImportError)


def one_line(exc):
    """The message of ``exc`` on one line (whitespace runs become one space).

    Examples
    --------
    >>> one_line(ValueError("bad\\n  value"))
    'bad value'
    >>> one_line(KeyError("q1"))
    'q1'
    >>> one_line(AssertionError())
    'AssertionError (run with --debug for the traceback)'
    """
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    message = " ".join(str(message).split())
    if not isinstance(exc, _EXPECTED) and not _is_safetensors_error(exc):
        prefix = type(exc).__name__
        message = f"{prefix}: {message}" if message else prefix
        return f"{message} (run with --debug for the traceback)"
    return message or type(exc).__name__


@contextlib.contextmanager
def interrupts_kept():
    """Raise at the end of the block a Ctrl-C that training swallowed.

    skorch ends a fit at a KeyboardInterrupt and keeps the network trained so
    far, the right thing in an interactive session; a command would then
    save a barely trained router and exit 0. Inside this block a SIGINT is
    recorded as well as raised, and raised again when the block ends, so
    the command stops with status 130 and writes nothing. Outside the main
    thread (no signal handler can be set there), and in a process started
    with SIGINT ignored (a background job of a script: ``locus fit ... &``),
    which keeps ignoring it as Python does, the block runs as is.

    Examples
    --------
    >>> import os, signal
    >>> # Python's own handler, as a process not started with SIGINT ignored has
    >>> handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    >>> try:
    ...     with interrupts_kept():
    ...         try:  # what skorch does around its training loop
    ...             os.kill(os.getpid(), signal.SIGINT)
    ...         except KeyboardInterrupt:
    ...             pass
    ...         print("training ended")
    ... except KeyboardInterrupt:  # raised again as the block ends
    ...     print("interrupted")
    training ended
    interrupted
    >>> _ = signal.signal(signal.SIGINT, handler)
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # A Ctrl-C meant for the foreground job must not end this one.
        yield
        return
    seen = []

    def record(signum, frame):
        seen.append(signum)
        signal.default_int_handler(signum, frame)

    try:
        previous = signal.signal(signal.SIGINT, record)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:
        raise KeyboardInterrupt
