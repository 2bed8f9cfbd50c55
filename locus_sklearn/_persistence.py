"""Safe persistence: one safetensors file with a JSON header; loading never unpickles.

The file holds the network weights, the pool (names, embeddings, costs, and
the stored evaluations the kernel readout reads) and, for a precomputed-vector
encoder, its vectors; the metadata holds the container's format version, the
network layout version (:data:`~._nn.NETWORK_LAYOUT`), the estimator kind,
its hyper-parameters and how to rebuild the query encoder.

The estimators call :func:`save_embedder` / :func:`load_embedder` and
:func:`save_router` / :func:`load_router`; this module never imports them
(the class to build is passed in), so data flows one way.
"""

import errno
import glob
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, stale temporary files stay
    fcntl = None

from ._device import resolve_device
from ._encoders import as_query_encoder
from ._evals import EvalTable
from ._nn import NETWORK_LAYOUT
from ._training import build_net
from ._version import __version__

__all__ = [
    "FORMAT_VERSION",
    "load_embedder",
    "load_router",
    "read_file",
    "save_embedder",
    "save_router",
    "write_file",
    "encoder_spec",
    "encoder_from_spec",
]

FORMAT_NAME = "locus_sklearn"
FORMAT_VERSION = 1


def encoder_spec(encoder):
    """JSON spec and tensors describing an ``encoder=`` value."""
    from ._encoders import QueryEncoder

    if isinstance(encoder, QueryEncoder):
        encoder = encoder.encoder
    if encoder is None or (isinstance(encoder, str) and encoder == "default"):
        return {"kind": "default"}, {}
    if isinstance(encoder, (str, os.PathLike)):
        return {"kind": "path", "path": str(Path(encoder).resolve())}, {}
    if isinstance(encoder, Mapping):
        keys = list(encoder)
        vectors = np.stack([np.asarray(encoder[k], dtype=np.float32) for k in keys])
        return {"kind": "mapping", "keys": keys}, {
            "encoder.vectors": torch.from_numpy(vectors)
        }
    return {"kind": "object", "type": type(encoder).__qualname__}, {}


def encoder_from_spec(spec, tensors, encoder):
    """The ``encoder=`` value to rebuild; ``encoder`` (from the caller) wins."""
    if encoder is not None:
        return encoder
    kind = spec["kind"]
    if kind == "default":
        return None
    if kind == "path":
        return spec["path"]
    if kind == "mapping":
        vectors = tensors["encoder.vectors"].numpy()
        return dict(zip(spec["keys"], vectors, strict=True))
    raise ValueError(
        f"The file was saved with a custom encoder object ({spec['type']}), which "
        "cannot be stored safely; pass it again with load(path, encoder=...)."
    )


def _temp_name(target):
    """A fresh temporary name beside ``target``: ``.<name>.<random>.tmp``."""
    return target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")


def _write_error(kind, code, path, what):
    """An OSError of type ``kind`` naming the file the user asked for (never a
    temporary file), with the error number ``code``."""
    error = kind(f"Cannot save {str(path)!r}: {what}.")
    error.errno = code  # kept for callers that map errors to exit codes
    return error


def _remove_stale_temp_files(target):
    """Delete temporary files that killed saves of ``target`` left behind.

    A writer holds an exclusive lock on its temporary file until it has been
    renamed, and the kernel drops the lock when a process dies: a temporary
    file whose lock can be taken belongs to no live writer.
    """
    if fcntl is None:
        return
    pattern = os.path.join(
        glob.escape(str(target.parent)), f".{glob.escape(target.name)}.*.tmp"
    )
    for stale in glob.glob(pattern):
        try:
            fd = os.open(stale, os.O_RDONLY)
        except OSError:
            continue  # renamed or removed meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(stale)
        except OSError:
            pass  # a save in progress holds it, or it is already gone
        finally:
            os.close(fd)


def write_file(path, metadata, tensors):
    """Write ``tensors`` and JSON ``metadata`` atomically to ``path``.

    A temporary file ``.<name>.<random>.tmp`` in the same folder is renamed
    over the target only once complete and flushed to disk, so a failure never
    leaves a half-written file. A new file gets the mode ``open()`` would give
    it (``0o666`` less the umask); an existing one keeps its mode. A symbolic
    link is followed: the file it points to is replaced, the link stays.
    Temporary files left by killed saves of the same target are removed after
    a successful save. Errors name ``path``, never the temporary file.
    """
    target = Path(os.path.realpath(path))
    header = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        **{key: json.dumps(value) for key, value in metadata.items()},
    }
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    # Serialised in memory and written through our own descriptor: save_file
    # creates its file itself, which would drop the mode and the lock below.
    data = save(tensors, metadata=header)
    if target.is_dir():
        raise _write_error(IsADirectoryError, errno.EISDIR, path, "it is a directory")
    if not target.parent.is_dir():
        raise _write_error(
            FileNotFoundError,
            errno.ENOENT,
            path,
            f"its folder {str(target.parent)!r} does not exist",
        )
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
        with os.fdopen(fd, "wb") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            if mode is not None:
                os.chmod(tmp, mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            # Renamed while still locked, so no other save takes it for stale.
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


def read_file(path, kind):
    """Read a file written by :func:`write_file`; check format and ``kind``.

    Returns
    -------
    metadata : dict
        The decoded JSON metadata (``format`` and ``format_version`` removed).
    tensors : dict of str to Tensor
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {str(path)!r}.")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            header = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
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
        raise ValueError(
            f"{str(path)!r} has format version {version}; this locus_sklearn reads "
            f"version {FORMAT_VERSION}."
        )
    try:
        metadata = {
            key: json.loads(value)
            for key, value in header.items()
            if key not in ("format", "format_version")
        }
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} has a corrupt header ({exc}).") from None
    if metadata.get("kind") != kind:
        raise ValueError(
            f"{str(path)!r} holds a {metadata.get('kind')}, not a {kind}; load it "
            f"with {metadata.get('kind')}.load."
        )
    # Files written before the layout was recorded hold layout 1.
    layout = metadata.pop("network_layout", 1)
    if layout != NETWORK_LAYOUT:
        raise ValueError(
            f"{str(path)!r} holds a network of layout version {layout}, but this "
            f"locus_sklearn ({__version__}) builds layout version {NETWORK_LAYOUT}; "
            "refit the estimator with this version and save it again."
        )
    return metadata, tensors


# ----------------------------------------------------------------- embedders
def _embedder_state(embedder):
    """(metadata, tensors) describing a fitted LocusEmbedder."""
    spec, tensors = encoder_spec(embedder.encoder)
    params = embedder._saved_params()
    params["enc_size"] = list(params["enc_size"])
    metadata = {
        "library_version": __version__,
        "network_layout": NETWORK_LAYOUT,
        "params": params,
        "encoder": spec,
        "n_query_features": int(embedder.n_query_features_),
        "classes": embedder.classes_.tolist(),
        "n_epochs": int(embedder.n_epochs_),
    }
    for name, value in embedder.net_.module_.state_dict().items():
        tensors[f"net.{name}"] = value
    return metadata, tensors


def _embedder_from_state(cls, metadata, tensors, *, encoder=None, device=None):
    """A fitted ``cls`` (LocusEmbedder) from :func:`_embedder_state`'s output."""
    params = dict(metadata["params"])
    params["enc_size"] = tuple(params["enc_size"])
    embedder = cls(
        encoder_from_spec(metadata["encoder"], tensors, encoder),
        device=device,
        **params,
    )
    embedder.encoder_ = as_query_encoder(embedder.encoder, device=device)
    embedder.n_query_features_ = metadata["n_query_features"]
    embedder.classes_ = np.asarray(metadata["classes"], dtype=object)
    embedder.n_epochs_ = metadata["n_epochs"]
    net = build_net(
        embedder._saved_params(),
        embedder.n_query_features_,
        device=resolve_device(device),
    )
    net.initialize()
    state = {k[len("net.") :]: v for k, v in tensors.items() if k.startswith("net.")}
    try:
        net.module_.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"The file's network weights do not fit: {exc}") from None
    net.module_.eval()
    embedder.net_ = net
    return embedder


def save_embedder(embedder, path):
    """Write a fitted LocusEmbedder to ``path``."""
    metadata, tensors = _embedder_state(embedder)
    write_file(path, {"kind": "LocusEmbedder", **metadata}, tensors)


def load_embedder(cls, path, *, encoder=None, device=None):
    """Read a LocusEmbedder (of class ``cls``) written by :func:`save_embedder`."""
    metadata, tensors = read_file(path, "LocusEmbedder")
    return _embedder_from_state(cls, metadata, tensors, encoder=encoder, device=device)


# ------------------------------------------------------------------- routers
def save_router(router, path):
    """Write a fitted LocusRouter: its embedder, then the pool."""
    metadata, tensors = _embedder_state(router._locus)
    metadata.update(
        kind="LocusRouter",
        pool=router.classes_.tolist(),
        cost_weight=float(router.cost_weight),
    )
    tensors["pool.embeddings"] = torch.from_numpy(router.model_embeddings_)
    if router.pool_evals_ is not None:
        encodings, table = router.pool_evals_
        metadata["memory_queries"] = table.queries.tolist()
        tensors["memory.encodings"] = torch.from_numpy(encodings)
        tensors["memory.model_index"] = torch.from_numpy(table.model_index)
        tensors["memory.query_index"] = torch.from_numpy(table.query_index)
        tensors["memory.score"] = torch.from_numpy(table.score)
    if router.model_costs_ is not None:
        tensors["pool.costs"] = torch.from_numpy(router.model_costs_)
    write_file(path, metadata, tensors)


def load_router(cls, embedder_cls, path, *, encoder=None, device=None):
    """Read a router (of class ``cls``, with an embedder of ``embedder_cls``)
    written by :func:`save_router`."""
    metadata, tensors = read_file(path, "LocusRouter")
    embedder = _embedder_from_state(
        embedder_cls, metadata, tensors, encoder=encoder, device=device
    )
    router = cls(embedder, cost_weight=metadata["cost_weight"])
    router.embedder_ = embedder
    router.encoder_ = embedder.encoder_
    router.n_query_features_ = embedder.n_query_features_
    router.classes_ = np.asarray(metadata["pool"], dtype=object)
    router.model_embeddings_ = tensors["pool.embeddings"].numpy()
    costs = tensors.get("pool.costs")
    router.model_costs_ = None if costs is None else costs.numpy().astype(np.float64)
    if router.model_embeddings_.shape[0] != len(router.classes_):
        raise ValueError(f"{str(path)!r} is corrupt: pool size mismatch.")
    router.pool_evals_ = None
    if "memory.encodings" in tensors:
        table = EvalTable(
            models=router.classes_.copy(),
            queries=np.asarray(metadata["memory_queries"], dtype=object),
            model_index=tensors["memory.model_index"].numpy(),
            query_index=tensors["memory.query_index"].numpy(),
            score=tensors["memory.score"].numpy(),
            query_task=None,
            n_input_rows=len(tensors["memory.score"]),
        )
        router.pool_evals_ = (tensors["memory.encodings"].numpy(), table)
    return router
