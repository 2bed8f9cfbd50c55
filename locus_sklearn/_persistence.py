"""Save and load fitted estimators; a loaded file is checked whole first.

A saved estimator is one file (:mod:`._files`): the network weights, the pool
(names, embeddings, costs, and the stored evaluations the kernel readout
reads) and, for a precomputed-vector encoder, its vectors; the JSON header
holds the network layout version (:data:`~._nn.NETWORK_LAYOUT`), the
estimator kind, its hyper-parameters (all but the run-time choices
``encoder``, ``device``, ``memory``, ``accelerator`` and ``verbose``;
``random_state`` as an int or None; for a router, also its ``embedder``
parameter's where they differ from its fitted embedder's, None standing
for ``LocusEmbedder()``) and how to rebuild the query encoder; where ``set_output`` was called,
the output configuration. The parameters a subclass adds are saved too (as
JSON scalars), and only then its class's name (``embedder_class``, or
``router_class`` beside the router's in ``router_params``), which load never
builds from (the file holds no code): it builds the classes it is given,
and names the saved one where their parameters differ.

Loading validates every field — header schema (no field it does not know)
and types, hyper-parameters against the estimator's own constraints, tensor
names, shapes, dtypes and finiteness, pool names (distinct and sorted),
indices and scores — before anything is built, and refuses a file whose
checksum does not match. Every failure is a ValueError naming the file and
the field.

The estimators call :func:`save_embedder` / :func:`load_embedder` and
:func:`save_router` / :func:`load_router`; this module never imports them
(the class to build is passed in), so data flows one way.
"""

import functools
import hashlib
import os
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.utils._param_validation import validate_parameter_constraints

from ._base import _check_costs_for_weight
from ._device import resolve_device
from ._encoders import (
    QueryEncoder,
    _check_mapping,
    _mapping_vector,
    _normalise_rows,
    as_query_encoder,
)
from ._evals import EvalTable, check_model_costs
from ._files import read_file, write_file
from ._nn import NETWORK_LAYOUT, LocusNetwork
from ._params import short_int
from ._refinement import REFINE_PRIOR_MIN
from ._shrinkage import mean_scores
from ._training import NETWORK_PARAMS, build_net, float32_default
from ._version import __version__
from ._warnings import warn_external

__all__ = [
    "encoder_from_spec",
    "encoder_spec",
    "load_embedder",
    "load_router",
    "save_embedder",
    "save_router",
]

# Hyper-parameters added since files were first written, with the values that
# reproduce what older files hold (a file without them predates them).
_ADDED_PARAMS = {
    "n_profile_regions": 0,
    "standardize_embedding": False,
    "profile_weight": 1.0,
    "agreement_weight": 0.0,
    "readout_neighbors": None,
    "readout_index": "exact",
    "readout_dtype": "float32",
    "refine_steps": 0,
    "refine_prior": 0.1,
    # Earlier files did not record the seed; they loaded with None.
    "random_state": None,
}
# Hyper-parameters that files of earlier versions hold and this one no longer
# has, each with why reading the file without it builds the same estimator.
_RETIRED_PARAMS = {
    # Adam's step size for the refinement, which now takes Gauss-Newton steps
    # to the same optimum (the embeddings agree within 1 % of the move,
    # benchmarks/refine_solver.py).
    "refine_step_size",
}

# Each encoder kind's spec fields (encoder_spec), "kind" included.
_ENCODER_FIELDS = {
    "default": {"kind"},
    "path": {"kind", "path"},
    "mapping": {"kind", "keys"},
    "hashed_mapping": {"kind"},
    "object": {"kind", "type"},
}
_ENCODER_KINDS = tuple(_ENCODER_FIELDS)

# Every header field a file of this or an earlier version holds, per kind
# ("format", "format_version", "checksum" and "network_layout" are read by
# _files.read_file); files of earlier versions lack some, never add others.
_EMBEDDER_FIELDS = {
    "kind",
    "library_version",
    "params",
    "encoder",
    "n_query_features",
    "classes",
    "n_epochs",
    "output_config",
    "embedder_class",
}
_HEADER_FIELDS = {
    "LocusEmbedder": _EMBEDDER_FIELDS,
    "LocusRouter": _EMBEDDER_FIELDS
    | {
        "pool",
        "cost_weight",
        "shrinkage",
        "shrinkage_fitted",
        "shrinkage_repeats",
        "memory_queries",
        "frozen_embedder",
        "embedder_params",
        "embedder_output_config",
        "router_class",
        "router_params",
    },
}

# What set_output(transform=...) accepts besides None (which changes nothing),
# the one key it sets in _sklearn_output_config.
_OUTPUT_CONTAINERS = ("default", "pandas", "polars")


def _hash(text):
    # surrogatepass: a query text may hold a lone surrogate (a decode with
    # errors="surrogateescape" gives them), which fit accepts; any other
    # text hashes as its UTF-8 bytes.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def encoder_spec(encoder, *, include_query_text=True, n_features=None):
    """JSON spec and tensors describing an ``encoder=`` value.

    With ``include_query_text=False`` a mapping encoder's keys (query texts)
    are not stored: its spec is ``hashed_mapping`` and loading needs the
    mapping again (``encoder=``). A mapping that is stored is checked as fit
    checks it, and to give ``n_features``-dimensional vectors where given:
    one changed after fit would otherwise be written to a file that load
    refuses. A model directory is stored as the absolute path a fitted
    :class:`QueryEncoder` resolved (``model_path_``); a bare path, or an
    unfitted encoder's, is resolved here, ``~`` expanded. A fitted
    :class:`QueryEncoder` is described by the encoder its fit resolved, which
    its ``transform`` uses, not by an ``encoder`` set after that fit; an
    unfitted one by its ``encoder`` parameter.
    """
    fitted_path = None
    if isinstance(encoder, QueryEncoder):
        fitted_path = getattr(encoder, "model_path_", None)
        # set_params(encoder=...) without a refit changes the parameter, not
        # what transform encodes with: the file must load as the encoder that
        # was saved, with model_path_ (read above) of that same fit.
        encoder = getattr(encoder, "_fitted_encoder", encoder.encoder)
    if encoder is None or (isinstance(encoder, str) and encoder == "default"):
        return {"kind": "default"}, {}
    if isinstance(encoder, (str, os.PathLike)):
        # The directory fit resolved and encodes with: the parameter resolved
        # again here read "~" literally, and a relative path against the
        # working directory of save, whose directory of that name (another
        # model, or none) the file then named.
        if fitted_path is None:
            fitted_path = Path(encoder).expanduser().resolve()
        return {"kind": "path", "path": str(fitted_path)}, {}
    if isinstance(encoder, Mapping):
        if not include_query_text:
            return {"kind": "hashed_mapping"}, {}
        try:
            dimension = _check_mapping(encoder)
        except (TypeError, ValueError) as exc:
            raise type(exc)(
                f"The mapping encoder was changed after fit and cannot be saved: {exc}"
            ) from None
        if n_features is not None and dimension != n_features:
            first = next(iter(encoder))
            raise ValueError(
                "The mapping encoder was changed after fit and cannot be saved: "
                f"its vectors (encoder[{first!r}] and the others) have dimension "
                f"{dimension}, but the estimator was fitted on {n_features}-"
                "dimensional encodings."
            )
        keys = list(encoder)
        vectors = np.stack([_stored_vector(k, encoder[k]) for k in keys])
        return {"kind": "mapping", "keys": keys}, {
            "encoder.vectors": torch.from_numpy(vectors)
        }
    return {"kind": "object", "type": type(encoder).__qualname__}, {}


def _stored_vector(key, value):
    """A mapping's vector as the file stores it, float32, such that the
    loaded encoder normalises it to the encoding fit served.

    A vector float32 holds exactly is stored as it is: loaded, it is the same
    float64 vector, normalised as at fit. Any other one is stored as its
    encoding (normalised in float64, then rounded), which normalised again
    gives itself back: the vector rounded first and normalised after (as
    files of earlier versions store it) moved most encodings by a float32
    step, and a tiny vector (1e-50) underflowed to zeros. A row normalised
    again can still move by one step in a few entries: 1 to 2 % of rows of
    heavy-tailed or low-dimensional (under 32) vectors, none of 20,000
    Gaussian ones of dimension 64 or more.
    """
    vector = _mapping_vector(key, value)
    stored = vector.astype(np.float32)
    if (stored != vector).any():
        stored = _normalise_rows(vector[None])[0]
    return stored


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
    if kind == "hashed_mapping":
        raise ValueError(
            "The file was saved without query text (include_query_text=False), so "
            "its precomputed encodings {query: vector} were not stored; pass them "
            "again as a mapping with load(path, encoder=mapping)."
        )
    raise ValueError(
        f"The file was saved with a custom encoder object ({spec['type']}), which "
        "cannot be stored safely; pass it again with load(path, encoder=...)."
    )


# ------------------------------------------------------------------ checking
class _Checker:
    """Checks of one file's fields; every error names the file and the field."""

    def __init__(self, path, metadata, tensors, router_cls=None):
        self.path = str(path)
        self.metadata = metadata
        self.tensors = tensors
        # The router class loading the file (None for an embedder's), which
        # a message on the embedder's class names.
        self.router_cls = router_cls

    def fail(self, field, problem):
        raise ValueError(
            f"{self.path!r} is not a valid locus_sklearn file: {field} {problem}."
        )

    def field(self, name, kind):
        """Header field ``name``, checked to be of JSON type ``kind``."""
        if name not in self.metadata:
            self.fail(f"header field {name!r}", "is missing")
        value = self.metadata[name]
        valid = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "str": isinstance(value, str),
            "dict": isinstance(value, dict),
            "names": isinstance(value, list) and all(isinstance(v, str) for v in value),
        }[kind]
        if not valid:
            self.fail(f"header field {name!r}", f"must be of type {kind}")
        if kind == "names":
            # No estimator holds such names (check_evals refuses an empty
            # model or query id at fit).
            if not value:
                self.fail(f"header field {name!r}", "is empty")
            if "" in value:
                self.fail(f"header field {name!r}", "holds an empty string ''")
            if len(set(value)) != len(value):
                self.fail(f"header field {name!r}", "repeats a name")
        return value

    def sorted_names(self, name, value):
        """Refuse header field ``name`` (distinct names, as :meth:`field`
        checked) where ``value`` is not in Python's str order, the order
        ``check_evals`` gives ``classes_`` and the code's merges and
        ``searchsorted`` calls assume."""
        for i, (before, after) in enumerate(pairwise(value)):
            if before > after:
                self.fail(
                    f"header field {name!r}",
                    f"is not sorted by name: {before!r} (position {i}) comes "
                    f"before {after!r}",
                )

    def tensor(self, name, shape, dtypes, *, finite=True):
        """Tensor ``name`` with ``shape`` (None: any size on that axis)."""
        if name not in self.tensors:
            self.fail(f"tensor {name!r}", "is missing")
        value = self.tensors[name]
        if value.dtype not in dtypes:
            self.fail(f"tensor {name!r}", f"has dtype {value.dtype}")
        if len(value.shape) != len(shape) or any(
            want is not None and got != want
            for got, want in zip(value.shape, shape, strict=True)
        ):
            self.fail(f"tensor {name!r}", f"has shape {tuple(value.shape)}")
        if finite and value.is_floating_point() and not torch.isfinite(value).all():
            self.fail(f"tensor {name!r}", "holds NaN or infinite values")
        return value

    def only(self, names):
        extra = sorted(set(self.tensors) - set(names))
        if extra:
            self.fail(f"tensor {extra[0]!r}", "is not part of a saved estimator")

    def only_fields(self, kind):
        """Refuse header fields that no version writes for ``kind``."""
        extra = sorted(set(self.metadata) - _HEADER_FIELDS[kind])
        if extra:
            self.fail(f"header field {extra[0]!r}", f"is not part of a saved {kind}")


def _check_embedder(check, cls):
    """Check an embedder's fields; return the tensor names it owns."""
    params = {**_ADDED_PARAMS, **check.field("params", "dict")}
    for name in _RETIRED_PARAMS:
        params.pop(name, None)
    # Later steps (the router's checks, building the embedder) read them too.
    check.metadata["params"] = params
    spec = check.field("encoder", "dict")
    n_features = check.field("n_query_features", "int")
    check.field("classes", "names")
    if check.field("n_epochs", "int") < 0 or n_features < 1:
        check.fail("header fields 'n_epochs' / 'n_query_features'", "are out of range")
    prior = _raise_refine_prior(params)
    if "embedder_class" in check.metadata:
        check.field("embedder_class", "str")
    _check_params(check, cls, params, "params")
    _check_output_config(check, "output_config")
    kind = spec.get("kind")
    if kind not in _ENCODER_KINDS:
        check.fail("header field 'encoder'", f"has an unknown kind {kind!r}")
    extra = sorted(set(spec) - _ENCODER_FIELDS[kind])
    if extra:
        check.fail("header field 'encoder'", f"has unknown fields {extra}")
    _check_network_sizes(check, params, n_features)
    # Each block adds tensors: an n_blocks the stored tensors cannot hold is
    # refused before a module of that many blocks is built to compare with.
    n_stored = sum(name.startswith("net.") for name in check.tensors)
    one_block = _expected_state(check, {**params, "n_blocks": 1}, n_features)
    per_block = sum(name.startswith("encoder.blocks.0.") for name in one_block)
    if params["n_blocks"] * per_block > n_stored:
        check.fail(
            "header field 'params'",
            f"has n_blocks={params['n_blocks']}, but the file holds {n_stored} "
            f"network tensors, too few for that many blocks of {per_block}",
        )
    expected = _expected_state(check, params, n_features)
    names = [f"net.{k}" for k in expected]
    if kind == "mapping":
        keys = spec.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            check.fail("header field 'encoder'", "must list its keys as strings")
        # A repeated key would be dropped building the mapping, an empty
        # mapping refused only then; a saved mapping has neither.
        if not keys:
            check.fail("header field 'encoder'", "lists no keys")
        if len(set(keys)) != len(keys):
            check.fail("header field 'encoder'", "repeats a key")
        check.tensor("encoder.vectors", (len(keys), n_features), (torch.float32,))
        names.append("encoder.vectors")
    elif kind in ("path", "object") and not isinstance(
        spec.get("path" if kind == "path" else "type"), str
    ):
        check.fail("header field 'encoder'", "is incomplete")
    for name, (shape, dtype) in expected.items():
        check.tensor(f"net.{name}", shape, (dtype,))
    # Files of versions before refinement have no scale; refine_steps > 0
    # then needs a refit (transform says so).
    if "embedding_scale" in check.tensors or params["refine_steps"] > 0:
        scale = check.tensor(
            "embedding_scale", (params["embedding_dim"],), (torch.float32,)
        )
        if not bool((scale > 0).all()):
            check.fail("tensor 'embedding_scale'", "is not positive")
        names.append("embedding_scale")
    if prior is not None:
        warn_external(
            f"{check.path!r} holds refine_prior={prior!r}, which versions before "
            f"this one accepted; it is now at least {REFINE_PRIOR_MIN:g} (with "
            "so weak a prior the refinement has no fixed point, and a model's "
            "embedding depends on the models refined beside it), and the file "
            f"is loaded with refine_prior={REFINE_PRIOR_MIN:g}. "
            + (
                "Its refine_steps=0 makes no use of it: nothing changes."
                if params["refine_steps"] == 0
                else f"With its refine_steps={params['refine_steps']}, embeddings "
                "made after loading differ from those made before saving."
            ),
            UserWarning,
        )
    return names


def _check_params(check, cls, params, field):
    """Check the embedder hyper-parameters ``params`` of header ``field``:
    LocusEmbedder's, and those of ``cls``'s own (a subclass's)."""
    own = set(cls._own_param_names())
    base = set(cls()._saved_params()) - own
    missing = sorted(base - set(params))
    if missing:
        check.fail(f"header field {field!r}", f"lacks {missing}")
    _check_own_params(check, "embedder", cls, own, set(params) - base, field)
    _check_own_values(check, field, {n: params[n] for n in own if n in params})
    if isinstance(params.get("enc_size"), list):
        params["enc_size"] = tuple(params["enc_size"])
    try:
        probe = _construct(cls, params)
        probe._validate_params()
        # Those a subclass fixes in its __init__ too, which _validate_params
        # (the signature's) skips.
        validate_parameter_constraints(
            {k: v for k, v in probe._parameter_constraints.items() if k in base},
            {k: params[k] for k in base if k in probe._parameter_constraints},
            caller_name=cls.__name__,
        )
        probe._check_structure()
    except (TypeError, ValueError) as exc:
        check.fail(f"header field {field!r}", f"is invalid ({exc})")


def _class_name(cls):
    """``module.qualname`` of ``cls``, as a file records a subclass."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_own_params(check, what, cls, own, saved, field):
    """Refuse a file whose ``what`` ("embedder" or "router") was saved with
    the subclass parameters ``saved`` (names, of header ``field``) where
    ``cls``, the class loading it, has the parameters ``own``.

    A file holds no code, so load builds the class it is given and never one
    named in the file (the file records it, in ``<what>_class``, only for
    this message): the message says which class to pass.
    """
    unknown, lacking = sorted(saved - own), sorted(own - saved)
    if not unknown and not lacking:
        return
    recorded = check.metadata.get(f"{what}_class")
    one = "an embedder" if what == "embedder" else "a router"
    if recorded is None and not unknown:
        # A file naming no class: of a class without parameters of its own,
        # or of this very subclass saved by a locus_sklearn that did not save
        # them (and loaded it with them reset): loaded, as then, but said.
        warn_external(
            f"{check.path!r} holds no {lacking}, parameters of {cls.__name__}: "
            f"it was saved from {one} of a class without them, or by a "
            "locus_sklearn that did not save a subclass's parameters; they take "
            f"{cls.__name__}'s defaults.",
            UserWarning,
        )
        return
    if recorded is not None:
        origin = f"{one} of class {recorded!r}"
        name = recorded.rpartition(".")[2]
    else:
        # A file of an earlier version, which did not name the class.
        origin = f"{one} of a subclass that has them"
        name = "TheSubclass"
    if unknown:
        problem = (
            f"has unknown names {unknown}, parameters that {cls.__name__} does not "
            f"take: it was saved from {origin}"
        )
    else:
        problem = (
            f"lacks {lacking}, parameters of {cls.__name__}: it was saved from "
            f"{origin}, which has none of them"
        )
    given = cls.__name__
    if what == "router" or check.router_cls is None:
        how = f"{name}.load(path)"
    else:
        how = f"{check.router_cls.__name__}.load(path, embedder_class={name})"
        given = f"embedder_class={given}"
    raise ValueError(
        f"{check.path!r} cannot be loaded with {given}: header field "
        f"{field!r} {problem}. A saved file holds no code, so load builds the "
        "class it is given, never one named in the file: load it with the class "
        f"it was saved from, as in {how}."
    )


def _check_own_values(check, field, values):
    """The values of a subclass's own parameters (``values``, of header
    ``field``), as :func:`_own_values` writes them."""
    for name, value in values.items():
        if not _is_own_value(value):
            check.fail(
                f"header field {field!r}",
                f"has {name} of type {type(value).__name__}, not None, a bool, "
                "an int, a float or a str",
            )


def _is_own_value(value):
    return value is None or isinstance(value, bool | int | float | str)


def _own_values(estimator):
    """The parameters ``estimator``'s subclass adds (``_own_param_names``),
    as a file holds them: JSON's scalars, which load as the value saved (a
    tuple would load as a list; other objects cannot be written safely)."""
    values = {}
    for name in type(estimator)._own_param_names():
        value = _json_value(getattr(estimator, name))
        if not _is_own_value(value):
            raise ValueError(
                f"{type(estimator).__name__}'s parameter {name} (a "
                f"{type(value).__name__}) cannot be saved: a file holds the "
                "parameters a subclass adds only as None, a bool, an int, a float "
                "or a str, and no code to rebuild other objects. Give it such a "
                "value, or pickle the estimator (joblib.dump), which keeps it."
            )
        values[name] = value
    return values


def _construct(cls, values):
    """``cls`` built with the parameter ``values``: those its signature
    takes passed to it, the others (LocusEmbedder's or LocusRouter's that a
    subclass fixes in its ``super().__init__`` call) set on it after, as the
    saved estimator held them."""
    names = set(cls._get_param_names())
    built = cls(**{k: v for k, v in values.items() if k in names})
    for name, value in values.items():
        if name not in names:
            setattr(built, name, value)
    return built


def _check_output_config(check, field):
    """The ``set_output`` configuration of header ``field``, where present."""
    if field not in check.metadata:
        return
    config = check.field(field, "dict")
    extra = sorted(set(config) - {"transform"})
    if extra:
        check.fail(f"header field {field!r}", f"has unknown names {extra}")
    if "transform" in config and config["transform"] not in _OUTPUT_CONTAINERS:
        check.fail(
            f"header field {field!r}",
            f"has transform={config['transform']!r}, not one of "
            f"{list(_OUTPUT_CONTAINERS)}",
        )


def _raise_refine_prior(params):
    """A file's ``refine_prior`` below REFINE_PRIOR_MIN (0 was accepted
    before that bound) raised to it; return the value read, or None."""
    prior = params.get("refine_prior")
    if (
        isinstance(prior, int | float)
        and not isinstance(prior, bool)
        and 0 <= prior < REFINE_PRIOR_MIN
    ):
        params["refine_prior"] = REFINE_PRIOR_MIN
        return prior
    return None


# The network's hyper-parameters that are each the length of an axis of one
# of its tensors (as the number of query features is).
_AXIS_PARAMS = ("embedding_dim", "n_latents", "hidden_dim", "n_profile_regions")


def _check_network_sizes(check, params, n_features):
    """Refuse a network size longer than every axis of the network tensors
    the file holds: no network of that size matches them, and building one
    to compare with (n_query_features=2**62) overflowed torch's size
    computation."""
    longest = max(
        (max(value.shape, default=1) for name, value in check.tensors.items()
         if name.startswith("net.")),
        default=None,
    )  # fmt: skip
    if longest is None:
        return  # no network tensors: named missing once the layout is known
    if n_features > longest:
        check.fail(
            "header field 'n_query_features'",
            f"is {short_int(n_features)}, longer than every axis of the "
            f"network tensors the file holds (the longest: {longest})",
        )
    for name in _AXIS_PARAMS:
        if params[name] > longest:
            check.fail(
                "header field 'params'",
                f"has {name}={short_int(params[name])}, longer than every axis "
                f"of the network tensors the file holds (the longest: {longest})",
            )


def _expected_state(check, params, n_features):
    """Names, shapes and dtypes of the network's state for ``params``."""
    # Keyed by each value's type too: 1, 1.0 and True are one dict key.
    network = tuple(
        (name, type(params[name]).__name__, params[name]) for name in NETWORK_PARAMS
    )
    try:
        return _state_shapes(n_features, network)
    except (RuntimeError, TypeError, OverflowError, ValueError):
        # Sizes whose products overflow int64 (a file without network
        # tensors, which _check_network_sizes cannot bound); torch's message
        # holds a C++ trace.
        sizes = ", ".join(f"{name}={short_int(params[name])}" for name in _AXIS_PARAMS)
        check.fail(
            "header fields 'params' / 'n_query_features'",
            f"describe a network too large to build (n_query_features="
            f"{short_int(n_features)}, {sizes})",
        )


@functools.lru_cache(maxsize=16)
def _state_shapes(n_features, network):
    """:func:`_expected_state` of the network settings ``network`` ((name,
    type name, value) triples), read-only. Cached: building the module, even
    on the meta device, is most of a small file's check (twice a load), and a
    service reloads files of one architecture."""
    # On the meta device nothing is allocated, whatever sizes the file names;
    # in float32, as saved, whatever the caller's default dtype.
    with torch.device("meta"), float32_default():
        module = LocusNetwork(n_features, **{name: v for name, _, v in network})
    return MappingProxyType(
        {
            name: (tuple(value.shape), value.dtype)
            for name, value in module.state_dict().items()
        }
    )


def _check_router(check, cls):
    """Check a router's fields beyond its embedder's (``cls`` its class);
    return its tensor names."""
    pool = check.field("pool", "names")
    # classes_ is documented sorted, and add_models and remove_models pair
    # the pool with its stored evaluations (re-sorted by check_evals) by
    # position: an edited file out of that order would predict from another
    # model's evaluations.
    check.sorted_names("pool", pool)
    cost_weight = check.field("cost_weight", "number")
    n_pool = len(pool)
    params = check.metadata["params"]
    names = ["pool.embeddings"]
    check.tensor("pool.embeddings", (n_pool, params["embedding_dim"]), (torch.float32,))
    # The settings are checked in every file, the fitted shrinkage only in
    # files of versions since the safeguard (earlier ones have none of it).
    _check_shrinkage_params(check)
    if "shrinkage_fitted" in check.metadata or "pool.mean_scores" in check.tensors:
        _check_shrinkage(check, n_pool)
        names.append("pool.mean_scores")
    costs = None
    if "pool.costs" in check.tensors:
        costs = check.tensor("pool.costs", (n_pool,), (torch.float64,))
        try:
            check_model_costs(costs.numpy(), np.asarray(pool, dtype=object))
        except ValueError as exc:
            check.fail("tensor 'pool.costs'", f"is invalid ({exc})")
        names.append("pool.costs")
    # As predict checks it: a positive weight without costs fails every call.
    try:
        _check_costs_for_weight(cost_weight, costs)
    except (TypeError, ValueError) as exc:
        check.fail("header field 'cost_weight'", f"is invalid ({exc})")
    memory = ("memory.encodings", "memory.model_index", "memory.query_index")
    memory += ("memory.score",)
    stored = any(name in check.tensors for name in memory)
    if stored or "memory_queries" in check.metadata:
        # Only the kernel readout reads them; no router without it keeps any.
        if not params.get("kernel_readout"):
            check.fail(
                "tensors 'memory.*' / header field 'memory_queries'",
                "are present, but kernel_readout=False stores no evaluations",
            )
        _check_pool_evals(check, pool)
        names += memory
    elif params.get("kernel_readout"):
        check.fail("tensor 'memory.encodings'", "is missing (kernel_readout=True)")
    if check.metadata.get("frozen_embedder", True) is not True:
        check.fail("header field 'frozen_embedder'", "must be true where present")
    # The embedder parameter is a LocusEmbedder (its settings in
    # embedder_params where they differ from the fitted embedder's, always
    # beside a frozen fitted one, whose parameter it would load as) or the
    # frozen fitted embedder; its own output configuration only for the one
    # that has one, a LocusEmbedder.
    if (
        "embedder_output_config" in check.metadata
        and check.metadata.get("frozen_embedder")
        and "embedder_params" not in check.metadata
    ):
        check.fail(
            "header field 'embedder_output_config'",
            "is present, but the embedder parameter is frozen",
        )
    _check_output_config(check, "embedder_output_config")
    if "embedder_params" in check.metadata:
        # Read as the fitted ones are: a parameter added after this version
        # is missing from its files.
        params = {**_ADDED_PARAMS, **check.field("embedder_params", "dict")}
        for name in _RETIRED_PARAMS:
            params.pop(name, None)
        check.metadata["embedder_params"] = params
        _check_params(check, cls, params, "embedder_params")
    _check_router_params(check)
    return names


def _check_router_params(check):
    """The parameters a router subclass adds (header field 'router_params',
    its class in 'router_class', both written only for one that adds some),
    against those of the class loading the file."""
    cls = check.router_cls
    saved = {}
    if "router_params" in check.metadata:
        saved = check.field("router_params", "dict")
        check.field("router_class", "str")
        _check_own_values(check, "router_params", saved)
    elif "router_class" in check.metadata:
        check.fail("header field 'router_class'", "is present without 'router_params'")
    own = set(cls._own_param_names())
    _check_own_params(check, "router", cls, own, set(saved), "router_params")
    if not saved:
        return
    try:
        _construct(cls, {**_router_values(check.metadata), **saved})._validate_params()
    except (TypeError, ValueError) as exc:
        check.fail("header field 'router_params'", f"is invalid ({exc})")


def _router_values(metadata):
    """The LocusRouter parameters (but ``embedder``) of a checked header."""
    return {
        "cost_weight": metadata["cost_weight"],
        "shrinkage": metadata.get("shrinkage"),
        # Files of versions before the option judged one shuffle of the folds.
        "shrinkage_repeats": metadata.get("shrinkage_repeats", 1),
    }


def _check_shrinkage_params(check):
    """The router's shrinkage settings, where the file holds them."""
    param = check.metadata.get("shrinkage")
    if not (
        param is None
        or param == "auto"
        or (isinstance(param, int | float) and not isinstance(param, bool))
        and 0 <= param <= 1
    ):
        check.fail("header field 'shrinkage'", 'must be null, "auto" or in [0, 1]')
    # Files of versions before the option have none (they judged one draw).
    if "shrinkage_repeats" in check.metadata:
        if check.field("shrinkage_repeats", "int") < 1:
            check.fail("header field 'shrinkage_repeats'", "is under 1")


def _check_shrinkage(check, n_pool):
    """The fitted shrinkage and the mean scores it shrinks toward."""
    fitted = check.field("shrinkage_fitted", "number")
    if not 0 <= fitted <= 1:
        check.fail("header field 'shrinkage_fitted'", "is outside [0, 1]")
    means = check.tensor("pool.mean_scores", (n_pool,), (torch.float64,)).numpy()
    if ((means < 0) | (means > 1)).any():
        check.fail("tensor 'pool.mean_scores'", "is outside [0, 1]")
    # Every version that writes the fitted value writes the setting beside it
    # (null for None): without it the router would load with shrinkage=None.
    if "shrinkage" not in check.metadata:
        check.fail("header field 'shrinkage'", "is missing")


def _check_pool_evals(check, pool):
    n_pool = len(pool)
    queries = check.field("memory_queries", "names")
    n_features = check.metadata["n_query_features"]
    check.tensor("memory.encodings", (len(queries), n_features), (torch.float32,))
    model = check.tensor("memory.model_index", (None,), (torch.int64,)).numpy()
    n_rows = len(model)
    query = check.tensor("memory.query_index", (n_rows,), (torch.int64,)).numpy()
    score = check.tensor("memory.score", (n_rows,), (torch.float32,)).numpy()
    if n_rows and (model.min() < 0 or model.max() >= n_pool):
        check.fail("tensor 'memory.model_index'", f"is outside [0, {n_pool})")
    if (np.diff(model) < 0).any():
        check.fail("tensor 'memory.model_index'", "is not sorted by model")
    if n_rows and (query.min() < 0 or query.max() >= len(queries)):
        check.fail("tensor 'memory.query_index'", f"is outside [0, {len(queries)})")
    # As check_evals leaves them: one row per (model, query), averaged, and
    # every model of the pool with the evaluations it was embedded from.
    if len(np.unique(model * len(queries) + query)) != n_rows:
        check.fail(
            "tensors 'memory.model_index' / 'memory.query_index'",
            "repeat a (model, query) pair",
        )
    empty = np.flatnonzero(np.bincount(model, minlength=n_pool) == 0)
    if len(empty):
        check.fail(
            "tensor 'memory.model_index'",
            f"has no stored evaluation of pool model {pool[empty[0]]!r}",
        )
    if ((score < 0) | (score > 1)).any():
        check.fail("tensor 'memory.score'", "is outside [0, 1]")


# What only versions that write a checksum write (every one of them is newer
# than checksums): a file holding any of it without a checksum had its
# checksum removed, and is not one of the files from before checksums that
# load unchecked. Hyper-parameters (_ADDED_PARAMS, _RETIRED_PARAMS) count too.
_CHECKSUM_ERA_FIELDS = {
    "shrinkage",
    "shrinkage_fitted",
    "shrinkage_repeats",
    "frozen_embedder",
    "embedder_params",
    "output_config",
    "embedder_output_config",
    "embedder_class",
    "router_class",
    "router_params",
}
_CHECKSUM_ERA_TENSORS = {"pool.mean_scores", "embedding_scale"}


def _checksum_era_field(metadata, tensors):
    """A field of ``metadata`` / ``tensors`` (as read) that only versions
    writing a checksum write, or None."""
    params = metadata.get("params")
    params = params if isinstance(params, dict) else {}
    spec = metadata.get("encoder")
    found = sorted(
        [f"header field {name!r}" for name in _CHECKSUM_ERA_FIELDS & set(metadata)]
        + [f"tensor {name!r}" for name in _CHECKSUM_ERA_TENSORS & set(tensors)]
        + [
            f"hyper-parameter {name!r}"
            for name in (set(_ADDED_PARAMS) | _RETIRED_PARAMS) & set(params)
        ]
    )
    if isinstance(spec, dict) and spec.get("kind") == "hashed_mapping":
        found.append("encoder kind 'hashed_mapping'")
    return found[0] if found else None


def _checked(path, kind, embedder_cls, router_cls=None):
    """Read ``path`` and check every field; return (metadata, tensors).

    ``router_cls``: the class loading a router's file."""
    metadata, tensors, intact = read_file(path, kind, known=tuple(_HEADER_FIELDS))
    # Before the checks, which add the parameters a file of an earlier
    # version lacks.
    newer = None if intact is not None else _checksum_era_field(metadata, tensors)
    check = _Checker(path, metadata, tensors, router_cls)
    check.only_fields(kind)
    check.field("library_version", "str")
    names = _check_embedder(check, embedder_cls)
    if kind == "LocusRouter":
        names += _check_router(check, embedder_cls)
    check.only(names)
    if newer is not None:
        check.fail(
            "header field 'checksum'",
            f"is missing, but the file holds the {newer}, which only versions "
            "that write a checksum write (the file was edited)",
        )
    if intact is False:
        check.fail("checksum", "does not match the contents (modified or damaged)")
    return metadata, tensors


# ----------------------------------------------------------------- embedders
def _json_value(value):
    """``value`` with NumPy scalars as the equal Python ones, which JSON holds.

    A hyper-parameter from a grid over ``np.arange`` (GridSearchCV) or a
    list of NumPy values is an ``np.int64``, ``np.float32``, ``np.bool_``:
    fit takes them, and json refused them with a bare TypeError. ``.item()``
    gives the same value (a float32 widens exactly to a float)."""
    return value.item() if isinstance(value, np.generic) else value


def _params_state(embedder):
    """The saved hyper-parameters of ``embedder`` as JSON holds them (a
    subclass's own ones too, checked by :func:`_own_values`)."""
    params = {k: _json_value(v) for k, v in embedder._saved_params().items()}
    params["enc_size"] = [_json_value(v) for v in params["enc_size"]]
    if isinstance(params["random_state"], np.random.RandomState):
        params["random_state"] = None  # _embedder_state warns
    params.update(_own_values(embedder))
    return params


def _output_state(embedder):
    """The ``set_output`` configuration of ``embedder`` as a file holds it
    ({} where none was set): clone, pickle and deepcopy keep it, and a
    pandas output is indexed by model name."""
    config = getattr(embedder, "_sklearn_output_config", {})
    if "transform" not in config:
        return {}
    value = config["transform"]
    # set_output stores any value; transform refuses another than these.
    if not isinstance(value, str) or value not in _OUTPUT_CONTAINERS:
        raise ValueError(
            f"The embedder's output configuration set_output(transform={value!r}) "
            f"cannot be saved: transform must be one of {list(_OUTPUT_CONTAINERS)}."
        )
    return {"transform": value}


def _embedder_state(embedder, *, include_query_text=True):
    """(metadata, tensors) describing a fitted LocusEmbedder."""
    # The fitted encoder, which transform encodes with: an ``encoder`` set
    # after fit (no refit) is not it, and stored would load as another
    # embedder than the one saved.
    spec, tensors = encoder_spec(
        embedder.encoder_,
        include_query_text=include_query_text,
        n_features=embedder.n_query_features_,
    )
    params = _params_state(embedder)
    if isinstance(embedder.random_state, np.random.RandomState):
        # Its state cannot be stored in JSON, and fit has advanced it: no
        # stored value would refit as this fit did.
        warn_external(
            "random_state is a RandomState instance, which cannot be saved; the "
            "file records random_state=None. Fit with an int random_state to "
            "save a seed that a refit of the loaded estimator reproduces.",
            UserWarning,
        )
    metadata = {
        "library_version": __version__,
        "network_layout": NETWORK_LAYOUT,
        "params": params,
        "encoder": spec,
        "n_query_features": int(embedder.n_query_features_),
        "classes": embedder.classes_.tolist(),
        "n_epochs": int(embedder.n_epochs_),
    }
    if type(embedder)._own_param_names():
        # Named for load's message only (a file builds the class load is
        # given). Only then: files of other embedders, those of subclasses
        # without parameters of their own included, stay readable by earlier
        # versions, which refused files of these anyway (unknown names).
        metadata["embedder_class"] = _class_name(type(embedder))
    output = _output_state(embedder)
    if output:
        # Only then: files of other embedders stay readable by earlier versions.
        metadata["output_config"] = output
    for name, value in embedder.net_.module_.state_dict().items():
        tensors[f"net.{name}"] = value
    scale = getattr(embedder, "embedding_scale_", None)
    if scale is not None:
        tensors["embedding_scale"] = torch.as_tensor(scale, dtype=torch.float32)
    return metadata, tensors


def _embedder_from_state(cls, metadata, tensors, path, *, encoder=None, device=None):
    """A fitted ``cls`` (LocusEmbedder) from checked metadata and tensors."""
    params = dict(metadata["params"])
    params["enc_size"] = tuple(params["enc_size"])
    given = device
    device = resolve_device(device)
    # The parameter is the device asked for, as a fit keeps it (None is
    # resolved again at each fit); the network goes to the resolved one.
    embedder = _construct(
        cls,
        {
            "encoder": encoder_from_spec(metadata["encoder"], tensors, encoder),
            "device": given,
            **params,
        },
    )
    # The device asked for, not the one resolved: with none asked, an encoder
    # switched to the ONNX backend (CPU only) after loading is not pinned to
    # the GPU the network went to.
    try:
        embedder.encoder_ = as_query_encoder(embedder.encoder, device=given)
    except ValueError as exc:
        spec = metadata["encoder"]
        if encoder is not None or spec["kind"] != "path":
            raise
        # The encoder's own message is fit's: it speaks of hub names and of
        # encoder=None, which here means the directory stored, not the
        # bundled model; it names neither the file nor load's encoder=.
        stored = spec["path"]
        problem = (
            f"cannot be used here ({exc})"
            if os.path.lexists(stored)
            else "does not exist here"
        )
        raise ValueError(
            f"The {metadata['kind']} in {str(path)!r} was fitted with the query "
            f"encoder model directory {stored!r}, which {problem}. Pass that "
            "model (say its directory, moved or copied here) with "
            "load(path, encoder=...)."
        ) from None
    # A mapping's dimension is known without encoding anything: a wrong one
    # given as encoder= is refused here, not at the first prediction.
    n_features = getattr(embedder.encoder_, "n_features_out_", None)
    if n_features is not None and n_features != metadata["n_query_features"]:
        raise ValueError(
            f"encoder gives {n_features}-dimensional query encodings, but the "
            f"{metadata['kind']} in {str(path)!r} was fitted on "
            f"{metadata['n_query_features']}-dimensional ones; pass the encoder "
            "it was fitted with."
        )
    _set_output_state(embedder, metadata.get("output_config", {}))
    embedder.n_query_features_ = metadata["n_query_features"]
    embedder.classes_ = np.asarray(metadata["classes"], dtype=object)
    embedder.n_epochs_ = metadata["n_epochs"]
    net = build_net(embedder._saved_params(), embedder.n_query_features_, device=device)
    state = {k[len("net.") :]: v for k, v in tensors.items() if k.startswith("net.")}
    _initialize_loaded(net, state)
    net.module_.eval()
    embedder.net_ = net
    scale = tensors.get("embedding_scale")
    embedder.embedding_scale_ = None if scale is None else scale.numpy()
    return embedder


def _initialize_loaded(net, state):
    """Initialise the skorch ``net`` with its module's weights ``state`` (a
    state dict of float32 CPU tensors read from a file, used as they are).

    The module is built on the meta device, where its random initialisation
    draws nothing, and takes the tensors with ``load_state_dict(assign=True)``
    before skorch moves it to the net's device and builds the optimizer on
    its parameters. Built as a fit builds it, its random initialisation (then
    overwritten) drew from torch's process-wide generator: a load changed a
    caller's seeded random numbers, and those of a seeded fit running in
    another thread (which holds the seeded lock, not the generator).
    ``initialize_module`` is skorch's hook for building the module; it is set
    on the net only for this call, so that no pickle or clone carries it.
    """
    build = net.initialize_module

    def initialize_module():
        with torch.device("meta"):
            build()
        # The file's tensors are the module's own from here (each has its
        # own buffer, read into memory): no copy of the weights is made.
        net.module_.load_state_dict(state, assign=True)
        return net

    net.initialize_module = initialize_module
    try:
        # float32, as trained: under a float64 default dtype the module would
        # be built in it.
        with float32_default():
            net.initialize()
    finally:
        del net.initialize_module


def _set_output_state(embedder, config):
    """Give ``embedder`` the checked ``set_output`` configuration ``config``."""
    if "transform" in config:
        embedder.set_output(transform=config["transform"])


def save_embedder(embedder, path, *, include_query_text=True):
    """Write a fitted LocusEmbedder to ``path``.

    With ``include_query_text=False`` a mapping encoder is not stored (its
    keys are query texts): loading needs it again.
    """
    metadata, tensors = _embedder_state(embedder, include_query_text=include_query_text)
    advice = ""
    if "keys" in metadata["encoder"]:
        advice = (
            "; save(path, include_query_text=False) leaves the mapping encoder "
            "out (pass it again to load)"
        )
    write_file(
        path,
        {"kind": "LocusEmbedder", **metadata},
        tensors,
        too_large_advice=advice,
    )


def load_embedder(cls, path, *, encoder=None, device=None):
    """Read a LocusEmbedder (of class ``cls``) written by :func:`save_embedder`."""
    metadata, tensors = _checked(path, "LocusEmbedder", cls)
    return _embedder_from_state(
        cls, metadata, tensors, path, encoder=encoder, device=device
    )


# ------------------------------------------------------------------- routers
def save_router(router, path, *, include_query_text=True):
    """Write a fitted LocusRouter: its embedder, then the pool.

    With ``include_query_text=False`` the stored evaluations keep a SHA-256
    hash of each query instead of its text (their encodings are kept), and a
    mapping encoder is not stored.
    """
    locus = router._fitted_locus()
    param = router.embedder
    # The parameter (which a clone refits with) may have been replaced after
    # fit; the file holds one network, the fitted embedder's, and settings.
    # A FrozenEstimator is tested first and by type: its __getattr__ forwards
    # any other attribute (_saved_params included) to the embedder it wraps.
    frozen_param = isinstance(param, FrozenEstimator)
    if frozen_param and param.estimator is not locus:
        raise ValueError(
            "The router's embedder parameter, set after fit, is "
            f"FrozenEstimator({type(param.estimator).__name__}(...)) wrapping an "
            "embedder other than the fitted one (embedder_); a file holds one "
            "network, the fitted embedder's, and cannot hold that one too. Before "
            "saving, set the parameter back with router.set_params(embedder=...) "
            "(None, a LocusEmbedder or FrozenEstimator(router.embedder_)) or refit "
            "the router on it; or pickle the router (joblib.dump), which keeps both."
        )
    # A LocusEmbedder, tested on the class: this module does not import it
    # (the class imports this module).
    if not (param is None or frozen_param or hasattr(type(param), "_saved_params")):
        raise ValueError(
            "The router's embedder parameter, set after fit, cannot be saved: "
            f"embedder must be None, a LocusEmbedder or a FrozenEstimator wrapping "
            f"the fitted embedder_; got {type(param).__name__}."
        )
    if (
        param is not None
        and not frozen_param
        and type(param)._own_param_names() != type(locus)._own_param_names()
    ):
        # Load builds both with one class (embedder_class=), which cannot take
        # the settings of both.
        raise ValueError(
            "The router's embedder parameter, set after fit, is a "
            f"{type(param).__name__}, whose own parameters "
            f"{type(param)._own_param_names()} differ from those of the fitted "
            f"embedder_'s class {type(locus).__name__} "
            f"({type(locus)._own_param_names()}); a file loads both with one "
            "class. Before saving, set the parameter back with "
            "router.set_params(embedder=...) or refit the router on it; or pickle "
            "the router (joblib.dump), which keeps both."
        )
    metadata, tensors = _embedder_state(locus, include_query_text=include_query_text)
    spec = metadata["encoder"]
    metadata.update(
        kind="LocusRouter",
        pool=router.classes_.tolist(),
        cost_weight=float(router.cost_weight),
    )
    own = _own_values(router)
    if own:
        # A subclass's own parameters, loaded by that class (its name is for
        # load's message). Only then: files of other routers stay readable by
        # earlier versions.
        metadata.update(router_class=_class_name(type(router)), router_params=own)
    if isinstance(router.embedder_, FrozenEstimator) or frozen_param:
        # Fitted on it, or the fitted embedder frozen as the parameter after
        # fit: loaded frozen, parameter and embedder_ both, so that a clone
        # reuses it. Only then: files of other routers stay readable by
        # earlier versions.
        metadata["frozen_embedder"] = True
    if not frozen_param:
        # embedder__<name> set after fit: the parameter, which a clone refits
        # with, is no longer the fitted embedder's settings. Stored only then,
        # as frozen_embedder is, and always beside a frozen fitted embedder,
        # which the parameter would load as. None is LocusEmbedder() (what
        # it stands for at the next fit): stored as those settings, so that
        # the file of a default router stays readable by earlier versions,
        # and loaded as that embedder.
        params = _params_state(type(locus)() if param is None else param)
        if params != metadata["params"] or "frozen_embedder" in metadata:
            metadata["embedder_params"] = params
        # Its own set_output, where not the fitted embedder's (which clone
        # gave embedder_ at fit, and load gives the parameter).
        output = {} if param is None else _output_state(param)
        if output != metadata.get("output_config", {}):
            metadata["embedder_output_config"] = output
    tensors["pool.embeddings"] = torch.from_numpy(router.model_embeddings_)
    means = np.asarray(router.model_mean_scores_, dtype=np.float64)
    # Unknown (NaN) only for a router read from an earlier version's file
    # without stored evaluations: saved as it came, without the fields.
    if np.isfinite(means).all():
        metadata.update(
            shrinkage=_json_value(router.shrinkage),
            shrinkage_fitted=float(router.shrinkage_),
            shrinkage_repeats=int(router.shrinkage_repeats),
        )
        tensors["pool.mean_scores"] = torch.from_numpy(means)
    if router.pool_evals_ is not None:
        encodings, table = router.pool_evals_
        queries = table.queries.tolist()
        if not include_query_text:
            queries = [_hash(q) for q in queries]
        metadata["memory_queries"] = queries
        tensors["memory.encodings"] = torch.from_numpy(encodings)
        tensors["memory.model_index"] = torch.from_numpy(table.model_index)
        tensors["memory.query_index"] = torch.from_numpy(table.query_index)
        # float32 on disk, as the readout reads them (and as files of earlier
        # versions hold them): the table keeps float64.
        tensors["memory.score"] = torch.from_numpy(table.score.astype(np.float32))
    if router.model_costs_ is not None:
        tensors["pool.costs"] = torch.from_numpy(router.model_costs_)
    advice = ""
    if include_query_text and ("memory_queries" in metadata or "keys" in spec):
        advice = (
            "; save(path, include_query_text=False) stores a hash of each query "
            "in place of its text, and leaves a mapping encoder out"
        )
    write_file(path, metadata, tensors, too_large_advice=advice)


def load_router(cls, embedder_cls, path, *, encoder=None, device=None):
    """Read a router (of class ``cls``, with an embedder of ``embedder_cls``)
    written by :func:`save_router`."""
    metadata, tensors = _checked(path, "LocusRouter", embedder_cls, cls)
    embedder = _embedder_from_state(
        embedder_cls, metadata, tensors, path, encoder=encoder, device=device
    )
    # The parameter is an unfitted copy, as fit leaves it: set_params on it
    # (embedder__...) must not change the fitted embedder_. A copy of the
    # parameters, not sklearn.clone: that would deep-copy an encoder model or
    # mapping the two can share, since set_params replaces values and never
    # edits them. A router fitted on a frozen embedder gets it frozen again,
    # as parameter and fitted embedder_ both (as fit leaves them), so that a
    # clone refits as the original's clone would, reusing it; a parameter
    # replaced after fit by a LocusEmbedder loads as that (None as
    # LocusEmbedder(), which it stands for).
    frozen = FrozenEstimator(embedder) if metadata.get("frozen_embedder") else None
    if frozen is not None and "embedder_params" not in metadata:
        param = frozen
    else:
        # By name (as _saved_params reads them): a subclass may fix some of
        # LocusEmbedder's parameters and leave them out of its signature.
        run_time = {name: getattr(embedder, name) for name in embedder._RUN_TIME_PARAMS}
        param = _construct(
            embedder_cls,
            {
                **run_time,
                **embedder._saved_params(),
                **metadata.get("embedder_params", {}),
            },
        )
        _set_output_state(
            param,
            metadata.get("embedder_output_config", metadata.get("output_config", {})),
        )
    router = _construct(
        cls,
        {
            "embedder": param,
            **_router_values(metadata),
            **metadata.get("router_params", {}),
        },
    )
    router.embedder_ = embedder if frozen is None else frozen
    router.encoder_ = embedder.encoder_
    router.n_query_features_ = embedder.n_query_features_
    router.classes_ = np.asarray(metadata["pool"], dtype=object)
    router.model_embeddings_ = tensors["pool.embeddings"].numpy()
    costs = tensors.get("pool.costs")
    router.model_costs_ = None if costs is None else costs.numpy()
    router.pool_evals_ = None
    if "memory.encodings" in tensors:
        table = EvalTable(
            models=router.classes_.copy(),
            queries=np.asarray(metadata["memory_queries"], dtype=object),
            model_index=tensors["memory.model_index"].numpy(),
            query_index=tensors["memory.query_index"].numpy(),
            score=tensors["memory.score"].numpy().astype(np.float64),
            query_task=None,
            n_input_rows=len(tensors["memory.score"]),
        )
        router.pool_evals_ = (tensors["memory.encodings"].numpy(), table)
    router.shrinkage_ = float(metadata.get("shrinkage_fitted", 0.0))
    router.shrinkage_scores_ = {}
    if "pool.mean_scores" in tensors:
        router.model_mean_scores_ = tensors["pool.mean_scores"].numpy()
    elif router.pool_evals_ is not None:  # a file of an earlier version
        router.model_mean_scores_ = mean_scores(router.pool_evals_[1])
    else:  # unknown, and unused: shrinkage_ is 0
        router.model_mean_scores_ = np.full(len(router.classes_), np.nan)
    return router
