"""The saved-file container: one safetensors file with a JSON header.

Writing is atomic and keeps file modes (:func:`write_file`); reading checks
the container (format, version, kind, network layout) and whether the file
is intact (:func:`read_file`). Loading never unpickles: safetensors holds
only arrays, and the header only JSON.
"""

import errno
import glob
import hashlib
import json
import os
import re
import secrets
import stat
import struct
import time
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from ._nn import NETWORK_LAYOUT
from ._paths import file_mode, not_regular_file, special_file
from ._version import __version__

try:  # advisory locks mark a save in progress (POSIX only)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["FORMAT_VERSION", "check_regular_file", "read_file", "write_file"]

FORMAT_NAME = "locus_sklearn"
FORMAT_VERSION = 1


def _digest(header, tensors):
    """SHA-256 of the header (but its checksum) and of every tensor's bytes."""
    h = hashlib.sha256()
    fields = sorted((k, v) for k, v in header.items() if k != "checksum")
    h.update(json.dumps(fields).encode())
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        h.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# Bytes of randomness in a temporary name: 16 hex digits.
_TEMP_TOKEN_BYTES = 8
# The longest file name most file systems take (bytes), and what a temporary
# name adds to its stem: ".", ".", 16 hex digits, ".tmp".
_NAME_MAX = 255
_TEMP_EXTRA = 2 * _TEMP_TOKEN_BYTES + 6
# A temporary file younger than this (seconds) and still empty may be a save
# between creating its file and locking it: not taken for a leftover.
_TEMP_GRACE = 60


def _temp_stem(target):
    """What a temporary name of ``target`` holds of its name: the name, or,
    where the name is too long to take the extra characters (a name ``open()``
    accepts could not be saved), its first 50 characters and a hash of it."""
    name = target.name
    if len(os.fsencode(name)) + _TEMP_EXTRA <= _NAME_MAX:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    return f"{name[:50]}~{digest}"


def _temp_name(target):
    """A fresh temporary name beside ``target``: ``.<name>.<random>.tmp``."""
    return target.with_name(
        f".{_temp_stem(target)}.{secrets.token_hex(_TEMP_TOKEN_BYTES)}.tmp"
    )


def _is_temp_name(target, name):
    """Whether the file name ``name`` is one :func:`_temp_name` gives ``target``
    (not merely alike: a user's ``.<name>.notes.tmp`` is not ours to delete)."""
    token = f"[0-9a-f]{{{2 * _TEMP_TOKEN_BYTES}}}"
    stem = re.escape(_temp_stem(target))
    return re.fullmatch(rf"\.{stem}\.{token}\.tmp", name) is not None


def check_regular_file(path):
    """Refuse a ``path`` that is not an existing regular file (or a symbolic
    link to one), before anything opens it.

    Checked with ``os.stat``: opening a named pipe blocks until something
    writes to it, and a pipe (``<(command)``) or a device is not a saved file
    that can be read twice or checked whole. A leading ``~`` is the home
    folder (messages name ``path`` as given).

    Raises
    ------
    TypeError
        If ``path`` is not a str or path-like.
    FileNotFoundError
        If nothing exists at ``path`` (or it is a broken symbolic link).
    IsADirectoryError
        If ``path`` is a folder.
    OSError
        If ``path`` is a named pipe, a device or a socket, named in the
        message (errno ``EINVAL``).

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> check_regular_file(os.path.join(folder, "missing.safetensors"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: No such file: '...missing.safetensors'.
    """
    _check_path(path, naming="a saved file")
    mode = file_mode(os.path.expanduser(path))
    if mode is None:
        raise FileNotFoundError(f"No such file: {os.fspath(path)!r}.")
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            f"{os.fspath(path)!r} is a folder; give the path of a saved file."
        )
    if not stat.S_ISREG(mode):
        raise not_regular_file(mode, repr(os.fspath(path)), "a saved file")


def target_problem(path):
    """Why :func:`write_bytes` refuses the existing file ``path`` (followed if
    a symbolic link), as ``(error type, errno, reason)``, or None (nothing
    there, or a regular file this process may write).

    Commands that write check it before any work, with the save's words. A
    leading ``~`` is the home folder, as for :func:`write_bytes`.

    >>> target_problem("/no/such/file") is None
    True
    """
    path = os.path.expanduser(path)
    try:
        info = os.stat(path)
    except OSError:  # nothing there (or a broken link): the write creates it
        return None
    if not stat.S_ISREG(info.st_mode):
        # The rename of the save would replace the node with a regular file:
        # a root's save to /dev/null would remove the system's /dev/null.
        return (
            OSError,
            errno.EINVAL,
            f"it is {special_file(info.st_mode)}, not a regular file; give the "
            "path of a file to write",
        )
    if not os.access(path, os.W_OK):
        # The rename needs only the folder's permission: without this a file
        # its owner made read-only would be replaced all the same.
        return (
            PermissionError,
            errno.EACCES,
            f"the file is not writable (mode {oct(info.st_mode & 0o777)}); make "
            "it writable or save elsewhere",
        )
    return None


def _write_error(kind, code, path, what):
    """An OSError of type ``kind`` naming the file the user asked for (never a
    temporary file), with the error number ``code``.

    Built as the OS's own errors are, ``kind(code, what, path)``: callers
    read ``errno`` (exit codes) and ``strerror`` (the CLI, which names the
    file itself: a message holding the path too said it twice).

    >>> str(_write_error(PermissionError, errno.EACCES, "r.locus", "it is locked"))
    "[Errno 13] it is locked: 'r.locus'"
    """
    return kind(code, what, os.fspath(path))


def _remove_stale_temp_files(target):
    """Delete temporary files that killed saves of ``target`` left behind.

    A writer holds an exclusive lock on its temporary file until it has been
    renamed, and the kernel drops the lock when a process dies: a temporary
    file whose lock can be taken belongs to no live writer.
    """
    if fcntl is None:
        return
    pattern = os.path.join(
        glob.escape(str(target.parent)), f".{glob.escape(_temp_stem(target))}.*.tmp"
    )
    for stale in glob.glob(pattern):
        if not _is_temp_name(target, os.path.basename(stale)):
            continue
        try:
            fd = os.open(stale, os.O_RDONLY)
        except OSError:
            continue  # renamed or removed meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A writer locks its file just after creating it and writes only
            # while it holds the lock: a young empty file may be one between
            # the two, not yet locked.
            info = os.fstat(fd)
            if info.st_size == 0 and time.time() - info.st_mtime < _TEMP_GRACE:
                continue
            os.unlink(stale)
        except OSError:
            pass  # a save in progress holds it, or it is already gone
        finally:
            os.close(fd)


def write_file(path, metadata, tensors, *, too_large_advice=""):
    """Write ``tensors`` and JSON ``metadata`` atomically to ``path``.

    A temporary file ``.<name>.<random>.tmp`` in the same folder (for a name
    too long to take the 22 extra characters, its first 50 characters and a
    hash of it stand for ``<name>``) is renamed over the target only once
    complete and flushed to disk, so a failure never leaves a half-written
    file. A new file gets the mode ``open()`` would give
    it (``0o666`` less the umask); an existing one keeps its mode. A symbolic
    link is followed: the file it points to is replaced, the link stays. A
    target that is not a regular file (a named pipe, a device such as
    ``/dev/null``, a socket) is refused, never replaced.
    Temporary files left by killed saves of the same target are removed after
    a successful save (an empty one once it is a minute old: until then it
    may be a concurrent save's, not yet locked). Errors name ``path``, never
    the temporary file.

    A header over the 100 MB safetensors reads and writes is a ValueError
    naming ``path``, ending with ``too_large_advice`` (how the caller could
    store less), and nothing is written.
    """
    _check_path(path)
    header = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        **{key: json.dumps(value) for key, value in metadata.items()},
    }
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    header["checksum"] = _digest(header, tensors)
    # Serialised in memory and written through our own descriptor: save_file
    # creates its file itself, which would drop the mode and the lock below.
    try:
        data = save(tensors, metadata=header)
    except SafetensorError as exc:
        # safetensors caps the header (the JSON, with every query text the
        # file stores) at 100 MB, reading as writing; its own error names
        # neither the file nor what made the header large.
        if "header too large" not in str(exc):
            raise
        size = sum(len(key) + len(value) for key, value in header.items())
        raise ValueError(
            f"Cannot save {str(path)!r}: its header (names, settings and any "
            f"query texts, about {size / 1e6:.0f} MB of JSON) is over the 100 MB "
            f"that safetensors files allow{too_large_advice}."
        ) from None
    write_bytes(path, _sorted_metadata(data))


def _sorted_metadata(data):
    """The serialised file ``data`` with its metadata keys in sorted order.

    safetensors (0.8 included) writes the metadata from a Rust HashMap, in
    an order that changes from process to process (safetensors issue #584),
    so two saves of the same estimator differed in their bytes, and a
    checksum (make, DVC) saw a new file. The header is written again, the
    same JSON with only the metadata's keys reordered, padded with spaces to
    a multiple of 8 bytes as safetensors pads it (the tensors that follow
    stay aligned); the tensor bytes and their offsets, which count from the
    end of the header, are unchanged.

    >>> import torch
    >>> from safetensors.torch import load
    >>> data = _sorted_metadata(save({"w": torch.ones(2)}, metadata={"b": "1", "a": "2"}))
    >>> n = struct.unpack("<Q", data[:8])[0]
    >>> list(json.loads(data[8 : 8 + n])["__metadata__"]), n % 8, load(data)["w"].tolist()
    (['a', 'b'], 0, [1.0, 1.0])
    """
    header, start = _header(data)
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[start:]


def _header(data):
    """The JSON header of serialised safetensors ``data`` (a dict) and the
    offset of the tensor bytes that follow it."""
    (n_header,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n_header].decode("utf-8")), 8 + n_header


def _check_path(path, naming="the file to write"):
    """Refuse a ``path`` that does not name a file (a file object, bytes)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"path must be a str or path-like naming {naming}; got "
            f"{path!r:.80} of type {type(path).__name__}."
        )


def write_bytes(path, data):
    """Write ``data`` atomically to ``path``: what :func:`write_file` does
    with the serialised file, for any bytes (the CLI's text outputs too).

    A temporary file beside the target, locked, flushed to disk and renamed
    over it; an existing file keeps its mode, and one this process may not
    write, or one that is not a regular file (a named pipe, a device), is
    refused, not replaced; a symbolic link is followed; temporary
    files of killed writes are removed afterwards. A leading ``~`` is the
    home folder. A path ``open()`` refuses is refused too: one ending with
    a separator, ``.`` or ``..`` (it names a folder), one whose folder as
    written does not exist (``missing/../out``), a loop of symbolic links.
    Errors are OSErrors naming ``path``, never the temporary file, with the
    reason as ``strerror`` (a ``path`` that is not a str or path-like is a
    TypeError).
    """
    _check_path(path)
    given = os.path.expanduser(os.fspath(path))
    try:
        os.stat(given)
    except OSError as exc:
        # realpath leaves a loop of links as it is, so the rename replaced
        # the link with a file, where open() refuses the path.
        if exc.errno == errno.ELOOP:
            raise _write_error(OSError, exc.errno, path, exc.strerror) from None
    target = Path(os.path.realpath(given))
    if target.is_dir():
        raise _write_error(IsADirectoryError, errno.EISDIR, path, "it is a directory")
    last = os.path.basename(given)
    if last in ("", os.curdir, os.pardir):
        # The resolved path drops a final separator, "." or "..": "dir/out/"
        # or "out/." would be written as a file "out" (an existing one
        # replaced) where the caller named a folder.
        ending = (
            f"its last part is {last!r}" if last else "it ends with a path separator"
        )
        raise _write_error(
            IsADirectoryError,
            errno.EISDIR,
            path,
            f"{ending}, so it names a folder; give a file name",
        )
    folder = os.path.dirname(given) or os.curdir
    if not os.path.isdir(folder):
        # The folder as written, not resolved: realpath takes
        # "missing/../out" for "out", where open() refuses it. The nearest
        # existing folder on the way: a file there is the problem
        # ("file.locus/x"), not a missing folder.
        existing = Path(folder)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing.exists() and not existing.is_dir():
            raise _write_error(
                NotADirectoryError,
                errno.ENOTDIR,
                path,
                f"{str(existing)!r} is a file, not a folder",
            )
        raise _write_error(
            FileNotFoundError,
            errno.ENOENT,
            path,
            f"its folder {folder!r} does not exist",
        )
    refused = target_problem(target)
    if refused is not None:
        kind, code, what = refused
        raise _write_error(kind, code, path, what)
    mode = target.stat().st_mode & 0o777 if target.exists() else None
    tmp = _temp_name(target)
    try:
        # 0o666 here lets the kernel apply the umask, as a plain open() would.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _write_error(
            type(exc),
            exc.errno,
            path,
            f"cannot create a file in {str(target.parent)!r} ({exc.strerror})",
        ) from None
    try:
        if fcntl is not None:
            # At once: until it holds the lock, a concurrent save of the same
            # target could take the file for a killed save's leftover.
            fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.chmod(tmp, mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if fcntl is not None:
                # Renamed while still locked, so no other save takes it for
                # stale.
                os.replace(tmp, target)
        if fcntl is None:
            # Windows refuses to rename a file this process holds open
            # (WinError 32), and there is no lock to keep: closed first.
            os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.errno is not None:
            raise _write_error(
                type(exc), exc.errno, path, exc.strerror or str(exc)
            ) from None
        raise
    _remove_stale_temp_files(target)


# Formats often taken for a saved file, by their first bytes.
_OTHER_FORMATS = (
    (b"PK\x03\x04", "a zip archive, as torch.save and numpy.savez write"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89HDF", "an HDF5 file"),
    # Protocols 2 to 5 start with PROTO and the protocol number.
    *((b"\x80" + bytes([n]), "a Python pickle") for n in range(2, 6)),
)


def _other_format(data):
    """What the bytes ``data`` look like, for an error ("" if not known)."""
    for magic, name in _OTHER_FORMATS:
        if data.startswith(magic):
            return f"; it looks like {name}"
    if data.lstrip()[:1] in (b"{", b"["):
        return "; it looks like JSON text"
    return ""


def _not_safetensors(data):
    """Why the bytes ``data`` are not a safetensors file, or None where its
    frame holds: an 8-byte little-endian header length, then a JSON header
    of that many UTF-8 bytes (starting with "{"), then the tensors.

    Checked before the header is parsed, whose decoder on other bytes
    explains nothing ("'utf-32-be' codec can't decode ...").

    >>> _not_safetensors(b"")
    'it is empty'
    >>> _not_safetensors(b"[1, 2]")
    'it is 6 bytes long, shorter than ...; it looks like JSON text'
    """
    if not data:
        return "it is empty"
    guess = _other_format(data)
    if len(data) < 8:
        return (
            f"it is {len(data)} bytes long, shorter than the 8-byte header length "
            f"a safetensors file starts with{guess}"
        )
    (n_header,) = struct.unpack("<Q", data[:8])
    if n_header > len(data) - 8:
        return (
            f"its first 8 bytes {data[:8]!r} give a header of {n_header} bytes, "
            f"but {len(data) - 8} bytes follow them{guess}"
        )
    header = data[8 : 8 + n_header]
    if not header.startswith(b"{"):
        return f"its header starts with {header[:8]!r}, not with '{{'{guess}"
    try:
        header.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"its header is not UTF-8 text (byte {8 + exc.start} is invalid)"
    return None


def read_file(path, kind, *, known=None):
    """Read a file written by :func:`write_file`; check format and ``kind``.

    ``known``: the kinds the caller reads (None: any); a file of another
    one, or of none, is not a valid file, where one of a known kind other
    than ``kind`` is to be loaded with its own class.

    Returns
    -------
    metadata : dict
        The decoded JSON metadata (``format``, ``format_version``,
        ``network_layout`` and ``checksum`` removed).
    tensors : dict of str to Tensor
    intact : bool or None
        Whether the file's checksum matches its contents; None for a file
        without one, which only versions before checksums were recorded
        write (the caller knows which fields those never held, and refuses
        a file with such a field and no checksum: the checksum was removed).
        The caller checks every field first, so that a corrupt field is
        named, and refuses a file that is not intact last.
    """
    check_regular_file(path)
    path = Path(path)  # as given, for messages
    # Read into memory, not mapped: a file overwritten in place while a
    # loaded router is in use must not pull memory from under it.
    data = path.expanduser().read_bytes()
    problem = _not_safetensors(data)
    if problem is not None:
        raise ValueError(
            f"{str(path)!r} is not a safetensors file ({problem}), so not a "
            "readable locus_sklearn file (save() writes those)."
        )
    try:
        header = _header(data)[0].get("__metadata__") or {}
        if not isinstance(header, dict):
            raise ValueError("the metadata is not a mapping")
        tensors = load(data)
    except Exception as exc:  # safetensors raises several types for bad files
        raise ValueError(
            f"{str(path)!r} is not a readable locus_sklearn file ({exc})."
        ) from None
    if header.get("format") != FORMAT_NAME:
        raise ValueError(
            f"{str(path)!r} is a safetensors file but not a locus_sklearn one."
        )
    version = header.get("format_version")
    if version != str(FORMAT_VERSION):
        # A version number: advice on upgrading or refitting. Not one of more
        # digits than any version will have (int() refuses over 4300).
        number = int(version) if re.fullmatch("[0-9]{1,9}", str(version)) else None
        raise ValueError(
            f"{str(path)!r} has format version {version}; this locus_sklearn "
            f"({__version__}) reads version {FORMAT_VERSION}"
            f"{_version_advice(number, FORMAT_VERSION)}."
        )
    checksum = header.get("checksum")
    intact = None if checksum is None else checksum == _digest(header, tensors)
    metadata = {}
    for key, value in header.items():
        if key in ("format", "format_version", "checksum"):
            continue
        try:
            metadata[key] = json.loads(value)
        except RecursionError:
            problem = "nested too deeply to read"
        except json.JSONDecodeError as exc:
            problem = str(exc)
        except ValueError:
            # An int of more digits than Python converts; its own message
            # advises raising that limit, no help with a damaged file.
            problem = "an int of more digits than Python reads"
        else:
            continue
        raise ValueError(
            f"{str(path)!r} has a corrupt header (field {key!r}: {problem})."
        )
    found = metadata.get("kind")
    if not isinstance(found, str) or (known is not None and found not in known):
        # Not another estimator's file: no class could load it.
        problem = "is missing" if found is None else f"has an unknown value {found!r}"
        raise ValueError(
            f"{str(path)!r} is not a valid locus_sklearn file: header field "
            f"'kind' {problem}."
        )
    if found != kind:
        raise ValueError(
            f"{str(path)!r} holds a {found}, not a {kind}; load it with {found}.load."
        )
    if "network_layout" in metadata:
        layout = metadata.pop("network_layout")
    else:
        layout = _unrecorded_layout(tensors)
    if layout != NETWORK_LAYOUT:
        raise ValueError(
            f"{str(path)!r} holds a network of layout version {layout}, but this "
            f"locus_sklearn ({__version__}) builds layout version {NETWORK_LAYOUT}"
            f"{_version_advice(layout, NETWORK_LAYOUT)}."
        )
    return metadata, tensors, intact


def _unrecorded_layout(tensors):
    """The network layout of a file that does not record one (versions before
    the layout was recorded): layout 1, but for the first versions' files,
    whose attention was torch's ``nn.MultiheadAttention`` (parameters
    ``attention.in_proj_weight``, ...) until locus_sklearn's own attention
    (``attention.query``, ``attention.key_value``, ``attention.out``) renamed
    them: layout 0, which this network cannot load.

    >>> _unrecorded_layout({"net.encoder.pool.attention.in_proj_weight": None})
    0
    >>> _unrecorded_layout({"net.encoder.pool.attention.query.weight": None})
    1
    """
    if any(name.endswith("attention.in_proj_weight") for name in tensors):
        return 0
    return 1


def _version_advice(found, current):
    """What to do with a file of version ``found`` (an int, or None where the
    file holds no version number) that this locus_sklearn, which reads
    version ``current``, refuses: to be appended to the message.

    A newer file needs a newer locus_sklearn; an older one is refitted, as
    the network it holds cannot be read into this version's.

    >>> _version_advice(2, 1)
    '; the file was written by a newer locus_sklearn: upgrade it (pip install -U locus_sklearn) to load the file'
    >>> _version_advice(0, 1)
    '; refit the estimator with this version and save it again'
    >>> _version_advice("x", 1)
    ''
    """
    if not isinstance(found, int) or isinstance(found, bool):
        return ""
    if found > current:
        return (
            "; the file was written by a newer locus_sklearn: upgrade it "
            "(pip install -U locus_sklearn) to load the file"
        )
    return "; refit the estimator with this version and save it again"
