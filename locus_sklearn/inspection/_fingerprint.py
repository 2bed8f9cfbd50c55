"""Fingerprinting: is the model behind an endpoint one we already know?

Embeddings of one model built from different evaluation subsets lie close
together compared with the distances between different models (paper,
appendix E.3). A distance threshold calibrated on a reference pool turns the
nearest reference model into a match / no-match decision.
"""

import contextlib
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import Bunch, check_random_state
from sklearn.utils.validation import check_is_fitted

from .._embedder import FewEvaluationsWarning
from .._evals import _object_frame, _preview, check_evals
from .._params import validate_random_state
from .._warnings import FILTERS_LOCK, warn_external
from ._common import as_pool, check_metric, match_threshold, pairwise
from ._score_agreement import _check_threshold_kind

__all__ = ["calibrate_fingerprint_threshold", "match_models"]


def _as_embedder(embedder):
    """The embedder of a fitted router, or the embedder itself."""
    if isinstance(embedder, BaseEstimator):
        # An unfitted router has no embedder_ and was refused as having no
        # transform, which hid the cause. Only scikit-learn estimators: on
        # any other object with fit, check_is_fitted raised scikit-learn's
        # AttributeError about __sklearn_tags__, though anything with
        # transform is documented to work; its transform says if it is not
        # ready.
        check_is_fitted(embedder)
    embedder = getattr(embedder, "embedder_", embedder)
    if not hasattr(embedder, "transform"):
        raise TypeError(
            "embedder must have transform(evals) -> ndarray of shape (n_models, d), "
            f"like a fitted LocusEmbedder or a fitted router; got "
            f"{type(embedder).__name__}."
        )
    return embedder


@contextlib.contextmanager
def _recording():
    """Record the warnings of the block, for :func:`_reissue`.

    A FewEvaluationsWarning is recorded whatever the caller's filters (an
    "error" one would raise the internal message): _reissue applies them to
    its own. Under FILTERS_LOCK, as every block of the library that changes
    the process-wide filters (see ``_warnings``): two such blocks
    overlapping in two threads could leave each other's filters in place.
    """
    with FILTERS_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FewEvaluationsWarning)
        yield caught


def _smallest_set(embedder):
    """The embedder's smallest training set, in words."""
    low = getattr(embedder, "enc_size", None)
    return f"enc_size[0]={int(low[0])}" if low is not None else "smallest training set"


def _reissue(caught, few_message):
    """Warnings of an internal transform (recorded by :func:`_recording`),
    raised again for the caller. A FewEvaluationsWarning names the internal
    models and asks for more scored queries per model; the cause is the
    caller's argument, so it is said once, as ``few_message``."""
    few = False
    for w in caught:
        if issubclass(w.category, FewEvaluationsWarning):
            few = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if few:
        warn_external(few_message, FewEvaluationsWarning)


def calibrate_fingerprint_threshold(
    embedder,
    evals,
    *,
    n_resamples=5,
    n_evals=128,
    false_match_rate=0.01,
    metric="cosine",
    random_state=None,
):
    """Distance under which two embeddings are taken to be the same model.

    Each reference model with at least ``n_evals`` evaluations is embedded
    ``n_resamples`` times, each time from a random subset of ``n_evals`` of
    its evaluations. Self-distances (one model, two subsets) show how far an
    embedding moves when its evaluation set changes; cross-distances (two
    models) how far apart models are. The threshold is set so that a fraction
    ``false_match_rate`` of the cross pairs falls under it, and the resulting
    true-match rate (self pairs under it) is reported.

    Subset-vs-subset self-distances are a conservative stand-in for
    new-vs-reference ones when the reference embeddings are built from more
    evaluations, and when a model's subsets share few evaluations. The
    subsets are drawn independently, so a model with ``c`` evaluations has
    about ``n_evals**2 / c`` of them in common between two subsets, and at
    least ``2 * n_evals - c`` when it has fewer than ``2 * n_evals``: its
    self-distances then understate how far a fresh probe moves an embedding
    (identical subsets, at ``c = n_evals``, are at distance 0), and
    ``true_match_rate`` overstates what a probe of the model would match.

    Parameters
    ----------
    embedder : fitted LocusEmbedder or fitted router
        Anything with ``transform(evals)`` returning one embedding per model of
        ``evals`` in sorted model-name order; a router's ``embedder_`` is used.
    evals : DataFrame or mapping of columns
        Scored evaluations of the reference models (``model``, ``query``,
        ``score``).
    n_resamples : int, default=5
        Embeddings per model, at least 2.
    n_evals : int, default=128
        Evaluations per embedding, the size of a probe of an unknown endpoint.
        Models with fewer evaluations are skipped; those with fewer than
        ``2 * n_evals`` are used, with a warning.
    false_match_rate : float, default=0.01
        Target fraction of cross pairs (different models) under the threshold;
        the realised rate never exceeds it. A ValueError says so when more
        cross pairs than that are at distance 0, which every threshold >= 0
        matches.
    metric : {"cosine", "euclidean"}, default="cosine"
        Distance between embeddings.
    random_state : int, RandomState instance or None, default=None
        Seeds the subsets.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``threshold`` (float; pass it to :func:`match_models`),
        ``false_match_rate`` and ``true_match_rate`` (the realised rates on
        the reference pool), ``self_distances`` and ``cross_distances``
        (1-D arrays), ``models`` (the models used) and ``n_skipped`` (models
        with fewer than ``n_evals`` evaluations).

    Warns
    -----
    UserWarning
        If a model used has fewer than ``2 * n_evals`` evaluations, so that
        any two of its subsets overlap (the models and their counts are
        named).
    FewEvaluationsWarning
        If ``n_evals`` is under the embedder's ``enc_size[0]`` (the smallest
        set it was trained to embed from): the subsets' embeddings, and so
        the threshold, are less reliable.

    Notes
    -----
    The default embeddings mostly order models by strength, so models of
    like strength are hard to tell apart. On the benchmark pools an embedder
    trained with the agreement term and refining each embedding to its own
    rows, ``LocusEmbedder(agreement_weight=0.1, refine_steps=10)``, identified
    models from fresh evaluations more often (RouterBench 0.66 against 0.52,
    BFCL 0.16 against 0.11 over nine fits; the Training page of the user
    guide).

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.inspection import calibrate_fingerprint_threshold
    >>> pool = make_model_pool(n_models=4, n_queries=100, n_families=2,
    ...                        evals_per_model=60, n_features=8, random_state=0)
    >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=8, n_latents=2,
    ...                          n_blocks=1, n_heads=1, max_epochs=1,
    ...                          episodes_per_epoch=4, validation_fraction=0,
    ...                          enc_size=(16, 64), random_state=0).fit(pool.evals)
    >>> result = calibrate_fingerprint_threshold(
    ...     embedder, pool.evals, n_resamples=3, n_evals=30, false_match_rate=0.05,
    ...     random_state=0)
    >>> result.cross_distances.shape, result.self_distances.shape
    ((54,), (12,))
    >>> 0 <= result.false_match_rate <= 0.05
    True
    """
    embedder = _as_embedder(embedder)
    check_metric(metric)  # before embedding every subset, which is the slow part
    if not isinstance(n_resamples, Integral) or n_resamples < 2:
        raise ValueError(f"n_resamples={n_resamples!r} should be an int >= 2.")
    if isinstance(n_evals, bool) or not isinstance(n_evals, Integral) or n_evals < 1:
        raise ValueError(f"n_evals={n_evals!r} should be an int >= 1.")
    if not isinstance(false_match_rate, Real) or not 0 < false_match_rate < 1:
        raise ValueError(
            f"false_match_rate={false_match_rate!r} should be a number in (0, 1)."
        )
    validate_random_state(random_state, caller="calibrate_fingerprint_threshold")
    table = check_evals(evals)
    rng = check_random_state(random_state)
    indptr = table.indptr
    counts = np.diff(indptr)
    eligible = np.flatnonzero(counts >= n_evals)
    if len(eligible) < 2:
        raise ValueError(
            f"Only {len(eligible)} model(s) have at least n_evals={n_evals} "
            f"evaluations (counts: {_preview(counts.tolist())}); calibration needs "
            "at least 2. Lower n_evals."
        )
    overlapping = eligible[counts[eligible] < 2 * n_evals]
    if len(overlapping):
        # Two subsets of n_evals of c evaluations share at least
        # 2 * n_evals - c of them: self-distances of near-identical subsets
        # say nothing about how far a fresh probe lands.
        warn_external(
            f"{len(overlapping)} of the {len(eligible)} models calibrated on have "
            f"fewer than 2 * n_evals = {2 * n_evals} evaluations: "
            f"{_preview(table.models[overlapping])} with "
            f"{_preview(counts[overlapping].tolist())}. Any two of such a model's "
            f"subsets of n_evals={n_evals} share evaluations (a model with exactly "
            "n_evals has identical subsets), so its self-distances understate how "
            "far a fresh probe moves its embedding and true_match_rate is too "
            "high. Lower n_evals to at most half a model's evaluations, or score "
            "those models on more queries.",
            UserWarning,
        )
    # One pseudo-model per (model, resample); zero-padded names sort in that order.
    rows, pseudo = [], []
    for i, m in enumerate(eligible):
        for r in range(n_resamples):
            picked = indptr[m] + rng.choice(counts[m], n_evals, replace=False)
            rows.append(np.sort(picked))
            pseudo.append(np.full(n_evals, f"m{i:07d}r{r:04d}", dtype=object))
    rows = np.concatenate(rows)
    columns = {
        "model": np.concatenate(pseudo),
        "query": table.queries[table.query_index[rows]],
        "score": table.score[rows].astype(np.float64),
    }
    if table.query_task is not None:
        columns["task"] = table.query_task[table.query_index[rows]]
    # Queries and tasks as objects, not pandas' inferred str dtype (lone
    # surrogates).
    frame = _object_frame(columns)
    with _recording() as caught:
        embeddings = np.asarray(embedder.transform(frame), dtype=np.float64)
    _reissue(
        caught,
        f"n_evals={n_evals} is fewer evaluations than the embedder's "
        f"{_smallest_set(embedder)}: each subset is embedded from n_evals "
        "evaluations, so the self- and cross-distances, and the threshold, are "
        "those of less reliable embeddings (as a probe of n_evals evaluations "
        "would be). Raise n_evals to calibrate for larger probes.",
    )
    distance = pairwise(embeddings, metric=metric)
    owner = np.repeat(np.arange(len(eligible)), n_resamples)
    a, b = np.triu_indices(len(embeddings), k=1)
    same = owner[a] == owner[b]
    self_distances = distance[a, b][same]
    cross_distances = distance[a, b][~same]
    threshold = match_threshold(cross_distances, false_match_rate)
    return Bunch(
        threshold=threshold,
        false_match_rate=float(np.mean(cross_distances <= threshold)),
        true_match_rate=float(np.mean(self_distances <= threshold)),
        self_distances=self_distances,
        cross_distances=cross_distances,
        models=table.models[eligible],
        n_skipped=int(table.n_models - len(eligible)),
    )


def match_models(
    new_embeddings,
    reference_embeddings,
    *,
    threshold,
    metric="cosine",
    names=None,
    reference_names=None,
):
    """Nearest reference model of each new embedding, and whether it matches.

    Parameters
    ----------
    new_embeddings : fitted router or array-like of shape (n_new, d)
        Embeddings of the models to identify (e.g. from
        ``embedder.transform(probe_evals)``), or a router whose pool to check.
    reference_embeddings : fitted router or array-like of shape (n_reference, d)
        The known models.
    threshold : float
        Largest distance counted as a match, e.g. the ``threshold`` of
        :func:`calibrate_fingerprint_threshold` (same ``metric``).
    metric : {"cosine", "euclidean"}, default="cosine"
        Distance between embeddings.
    names : array-like of shape (n_new,), default=None
        Names of the new models (the index of the result); row numbers when
        None. Must be None for a router or a DataFrame, whose index names the
        models.
    reference_names : array-like of shape (n_reference,), default=None
        Names of the reference models; row numbers when None. Must be None
        for a router or a DataFrame, whose index names the models.

    Returns
    -------
    matches : DataFrame of shape (n_new, 3)
        Indexed by the new models, with columns ``nearest`` (the nearest
        reference model; ties go to the lowest row), ``distance`` and
        ``is_match`` (``distance <= threshold``).

    Raises
    ------
    TypeError
        If ``threshold`` is not a number (a bool, a string, or the whole
        result of :func:`calibrate_fingerprint_threshold`: pass its
        ``.threshold``).
    ValueError
        If ``threshold`` is negative or NaN.

    Examples
    --------
    >>> from locus_sklearn.inspection import match_models
    >>> reference = [[1.0, 0.0], [0.0, 1.0]]
    >>> match_models([[0.99, 0.05], [0.7, 0.7]], reference, threshold=0.01,
    ...              names=["endpoint-1", "endpoint-2"],
    ...              reference_names=["model-a", "model-b"])
                nearest  distance  is_match
    endpoint-1  model-a  0.001273      True
    endpoint-2  model-a  0.292893     False
    """
    _check_threshold_kind(threshold, calibrator="calibrate_fingerprint_threshold")
    if not threshold >= 0:
        raise ValueError(f"threshold={threshold!r} should be a number >= 0.")
    new, names = as_pool(new_embeddings, names, name="new_embeddings")
    reference, reference_names = as_pool(
        reference_embeddings,
        reference_names,
        name="reference_embeddings",
        names_name="reference_names",
    )
    if new.shape[1] != reference.shape[1]:
        raise ValueError(
            f"new_embeddings has {new.shape[1]} dimensions but reference_embeddings "
            f"has {reference.shape[1]}; embed both with the same embedder."
        )
    distance = pairwise(new, reference, metric=metric)
    nearest = np.argmin(distance, axis=1)
    best = distance[np.arange(len(new)), nearest]
    # Names as objects, not pandas' inferred str dtype (lone surrogates).
    return _object_frame(
        {
            "nearest": reference_names[nearest],
            "distance": best,
            "is_match": best <= threshold,
        },
        index=names,
    )
