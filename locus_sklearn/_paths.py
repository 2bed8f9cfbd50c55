"""What is at a path, for the errors that refuse it before it is opened.

Torch-free, so that the CLI and the loaders can check a path before they
import the network code. Every reader that takes a path (saved files, the
evaluation tables, lm-eval output, gateway configurations, encodings files)
asks :func:`file_mode` what is there and refuses a named pipe, a device or a
socket with :func:`not_regular_file`, each in the words of its own file.
"""

import errno
import os
import stat

__all__ = ["file_mode", "not_regular_file", "special_file"]

# What a file that is neither a regular file nor a folder is, by its mode.
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file(mode):
    """What a file of mode ``mode`` (``st_mode``) that is not a regular file
    or a folder is, for an error.

    >>> import stat
    >>> special_file(stat.S_IFIFO | 0o600)
    'a named pipe (FIFO)'
    """
    for test, name in _SPECIAL_FILES:
        if test(mode):
            return name
    return "a special file"


def file_mode(path):
    """The ``st_mode`` of ``path`` (a symbolic link followed), or None if
    nothing is there (or a broken link, or a file on the way:
    ``"e.csv/x.csv"``).

    Any other ``OSError`` (a folder on the way without search permission, a
    loop of symbolic links) propagates, for the caller to name:
    ``os.path.isfile`` would have reported such a path as missing.

    >>> file_mode("/no/such/file") is None
    True
    """
    try:
        return os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


def not_regular_file(mode, subject, wanted):
    """The error refusing a file of mode ``mode`` that is neither a regular
    file nor a folder: ``OSError`` (errno ``EINVAL``) saying "{subject} is
    {what it is}, not a regular file; give the path of {wanted}".

    Such a file is not opened: opening a named pipe blocks until something
    writes to it, and a pipe (``<(command)``) gives its bytes once where a
    reader may need them whole or twice; a copy can be read.

    >>> import stat
    >>> error = not_regular_file(stat.S_IFCHR, "path='/dev/null'", "a file")
    >>> print(error)
    path='/dev/null' is a character device, not a regular file; give the path of a file.
    >>> error.errno == errno.EINVAL
    True
    """
    copy = " (copy what it gives to a file)" if stat.S_ISFIFO(mode) else ""
    error = OSError(
        f"{subject} is {special_file(mode)}, not a regular file; give the path "
        f"of {wanted}{copy}."
    )
    error.errno = errno.EINVAL  # kept for callers that map errors to exit codes
    return error
