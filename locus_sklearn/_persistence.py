"""Safe persistence: one safetensors file with a JSON header; loading never unpickles.

The file holds the network weights, the pool (names, embeddings, costs) and,
for a precomputed-vector encoder, its vectors; the metadata holds a format
version, the estimator kind, its hyper-parameters and how to rebuild the
query encoder.
"""

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

__all__ = [
    "FORMAT_VERSION",
    "read_file",
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


def write_file(path, metadata, tensors):
    """Write ``tensors`` and JSON ``metadata`` atomically to ``path``.

    A temporary file in the same folder is renamed over ``path`` only once
    complete, so a failure never leaves a half-written file behind.
    """
    path = Path(path)
    header = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        **{key: json.dumps(value) for key, value in metadata.items()},
    }
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", suffix=".tmp")
    os.close(fd)
    # mkstemp makes the file private (0600); give it the mode a plain open()
    # would, or keep the mode of the file it replaces.
    umask = os.umask(0)
    os.umask(umask)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~umask
    os.chmod(tmp, mode)
    try:
        save_file(tensors, tmp, metadata=header)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


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
    return metadata, tensors
