"""Same model behind two names? Compare their scores query by query.

Where two endpoints were scored on the same queries, how often their scores
differ is a direct test of whether they serve the same model. On the Shaberi
pool (169 chat models, graded scores) this finds a model's quantised, re-run
and prompt variants about four times as often as the model embeddings, which
are trained to predict correctness on *new* queries and so average that
per-query agreement away (``benchmarks/results/embedding_quality.md``).
"""

from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.utils import Bunch, check_random_state

from .._evals import _object_frame, _preview, check_evals
from .._params import validate_random_state
from ._common import disagreement, match_threshold

__all__ = [
    "calibrate_score_threshold",
    "match_models_by_scores",
    "score_disagreement",
]


def _check_threshold_kind(threshold, *, calibrator):
    """Raise TypeError unless ``threshold`` is a real number (not a bool).

    The whole result of a calibrate_*_threshold function (a Bunch) is the
    usual mistake: its repr runs to thousands of characters and would bury
    the remedy, so the message shows a short repr and names ``.threshold``.
    """
    if isinstance(threshold, Real) and not isinstance(threshold, bool | np.bool_):
        return
    if isinstance(threshold, Mapping) and "threshold" in threshold:
        raise TypeError(
            f"threshold must be a number; got a {type(threshold).__name__} with a "
            f"'threshold' entry, as {calibrator} returns: pass result.threshold, "
            "not the whole result."
        )
    shown = repr(threshold)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise TypeError(
        f"threshold must be a number (int or float, not bool); got {shown} "
        f"({type(threshold).__name__})."
    )


def _check_min_shared(min_shared):
    if (
        isinstance(min_shared, bool)
        or not isinstance(min_shared, Integral)
        or min_shared < 1
    ):
        raise ValueError(f"min_shared={min_shared!r} should be an int >= 1.")


def score_disagreement(evals, reference_evals=None, *, min_shared=32):
    """Mean score difference between models on the queries both answered.

    For models ``a`` and ``b`` the disagreement is the mean of
    ``|score_a(q) - score_b(q)|`` over the queries ``q`` that both were
    scored on: the share of those queries where their correctness differs,
    for 0/1 scores. Two endpoints serving one model disagree only as much as
    one model's reruns do; different models, as much as their answers differ.
    Unlike an embedding, this needs the models scored on the same queries,
    and reads nothing else about them.

    Scores given in float32 (as parquet files often hold them) would make
    ``|0.3 - 0.1|`` read 0.2000000104, over a threshold of 0.2, and split
    ties: two disagreements of 0.1 by hand would read 0.1000000040
    and 0.1000000015. So each score is read as the decimal it was written
    as, on a grid of 1e-7: exactly for scores written with at most 7
    decimals (0.3, 0.125), and moved by at most 5e-8 (under float32's own
    spacing just below 1) for others, such as the mean 1/3 of duplicate
    rows. The sum of ``|score_a - score_b|`` on that grid is exact, and is
    divided by the number of shared queries once, so a distance is the
    float nearest its exact value: that one is 0.2 itself, distances equal
    by hand are the same float (no rounding to some number of decimals,
    which a value halfway between two rounded ones would still split), and
    ties in :func:`match_models_by_scores`,
    :func:`~locus_sklearn.inspection.nearest_models` or
    :func:`~locus_sklearn.inspection.fallback_order` go by their stated
    rule (the first model in sorted order).

    Parameters
    ----------
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of the models to
        compare (the rows of the result).
    reference_evals : DataFrame or mapping of columns, default=None
        Scored evaluations of the models to compare them with (the columns);
        None compares the models of ``evals`` with each other.
    min_shared : int, default=32
        Pairs scored on fewer common queries get a NaN distance: with few
        queries the rate is too noisy to tell models apart (its standard
        error is up to ``0.5 / sqrt(n_shared)``).

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``distance``, a DataFrame of shape (n_models, n_reference) indexed by
        the models of ``evals`` and with the reference models as columns (both
        sorted, object-dtype indexes of str), holding the disagreement in
        [0, 1] (the float nearest its exact value on the 1e-7 score grid),
        NaN where a pair shares fewer than ``min_shared`` queries;
        ``n_shared``, a DataFrame of the same shape with the number of common
        queries of each pair.

    Raises
    ------
    ValueError
        If ``evals`` alone has a single model (no pair to compare), no
        pair of (different) models shares ``min_shared`` queries, so that
        nothing can be compared, or the two sides share more than
        900,719,925 queries (past which sums on the 1e-7 grid would no
        longer be exact in float64).

    Notes
    -----
    Each side's scores on the shared queries are held as a dense (n_shared
    queries, n_models) matrix. Scores on a few levels (0/1, a judge's grades)
    cost two matrix products per step between levels: 3,000 models with
    graded scores in tenths on 1,000 queries take about 7 s on two CPU cores;
    with more than 64 distinct score values it is one pass per model (about
    90 s there).

    See Also
    --------
    match_models_by_scores : Each model's nearest reference model, and
        whether it is close enough to be the same model.
    calibrate_score_threshold : The threshold for such a match.

    Examples
    --------
    >>> from locus_sklearn.inspection import score_disagreement
    >>> evals = {"model": ["a"] * 4 + ["a-int4"] * 4 + ["b"] * 4,
    ...          "query": ["q1", "q2", "q3", "q4"] * 3,
    ...          "score": [1, 1, 0, 0,  1, 1, 0, 1,  0, 0, 1, 1]}
    >>> result = score_disagreement(evals, min_shared=4)
    >>> result.distance
               a  a-int4     b
    a       0.00    0.25  1.00
    a-int4  0.25    0.00  0.75
    b       1.00    0.75  0.00

    Each model's nearest other model, and the neighbour and family functions
    on these distances:

    >>> import numpy as np
    >>> others = result.distance.mask(np.eye(3, dtype=bool))
    >>> others.idxmin(axis=1).tolist()
    ['a-int4', 'a', 'a-int4']
    >>> from locus_sklearn.inspection import fallback_order
    >>> fallback_order(result.distance, metric="precomputed")
    rank         1       2
    a       a-int4       b
    a-int4       a       b
    b       a-int4       a
    """
    _check_min_shared(min_shared)
    table = check_evals(evals, name="evals")
    same_pool = reference_evals is None
    if same_pool and table.n_models < 2:
        # Otherwise reported as no pair sharing min_shared queries (at most 0),
        # which hides that there is no pair at all.
        raise ValueError(
            f"evals has only 1 model ({table.models[0]!r}) and no reference_evals "
            "is given: there is no pair of different models to compare. Pass "
            "evals with at least 2 models, or reference_evals to compare it with."
        )
    reference = (
        table if same_pool else check_evals(reference_evals, name="reference_evals")
    )
    rate, common, n_both = _disagreement_on_shared(table, reference, same_pool)
    comparable = common >= min_shared
    if same_pool:
        np.fill_diagonal(comparable, False)  # a model against itself proves nothing
    if not comparable.any():
        where = "in evals" if same_pool else "between evals and reference_evals"
        off = common.copy()
        if same_pool:
            np.fill_diagonal(off, 0)
        raise ValueError(
            f"No pair of models {where} was scored on at least "
            f"min_shared={min_shared} common queries (the most any pair shares: "
            f"{int(off.max()) if off.size else 0}; {n_both} queries appear on "
            "both sides). Score the models on the same queries, or lower min_shared."
        )
    return _as_frames(rate, common, min_shared, table, reference)


def _disagreement_on_shared(table, reference, same_pool):
    """``disagreement`` of the models of two EvalTables on the queries both
    hold, and the number of such queries."""
    # Only the queries both sides answered can count.
    shared, rows, reference_rows = np.intersect1d(
        table.queries, reference.queries, assume_unique=True, return_indices=True
    )
    Y = table.to_dense()[rows]
    rate, common = disagreement(
        Y, None if same_pool else reference.to_dense()[reference_rows]
    )
    return rate, common, len(shared)


def _as_frames(rate, common, min_shared, table, reference):
    """The Bunch of :func:`score_disagreement`."""
    distance = np.where(common >= min_shared, rate, np.nan)
    # Object indexes, not pandas' inferred str dtype: it refuses a lone
    # surrogate, which model names may hold.
    index = pd.Index(table.models, dtype=object)
    columns = pd.Index(reference.models, dtype=object)
    return Bunch(
        distance=pd.DataFrame(distance, index=index, columns=columns),
        n_shared=pd.DataFrame(common, index=index, columns=columns),
    )


def match_models_by_scores(evals, reference_evals, *, threshold, min_shared=32):
    """Nearest reference model of each model by score disagreement, and whether it matches.

    Score a new endpoint on queries the known models were scored on, and this
    finds the known model whose scores it repeats most closely
    (:func:`score_disagreement`); within ``threshold`` it is taken to be that
    model (a rerun, a quantised copy, the same weights behind another API).
    :func:`calibrate_score_threshold` reads a threshold off the known pool,
    for probes of a given size; two runs of one model show what sampling
    alone gives. Models are told apart by name only within each table: a
    name in both is compared with its namesake like with any other reference
    model (to find duplicates within one pool, mask the diagonal of
    :func:`score_disagreement`'s distance, as its example does).

    Parameters
    ----------
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of the models to
        identify.
    reference_evals : DataFrame or mapping of columns
        Scored evaluations of the known models, on queries that include those
        of ``evals``.
    threshold : float
        Largest disagreement in [0, 1] counted as a match, e.g. the
        ``threshold`` of :func:`calibrate_score_threshold`.
    min_shared : int, default=32
        Reference models scored on fewer of a model's queries are not
        candidates for it.

    Returns
    -------
    matches : DataFrame of shape (n_models, 4)
        Indexed by the models of ``evals`` (sorted), with columns ``nearest``
        (the reference model with the smallest disagreement; ties go to the
        first in sorted order), ``distance`` (that disagreement, as
        :func:`score_disagreement` computes it: exact on the scores as
        written, so that a distance of 0.2 by hand is 0.2 and meets a
        threshold of 0.2, and distances equal by hand tie),
        ``n_shared`` (the queries it was measured on) and ``is_match``
        (``distance <= threshold``).

    Raises
    ------
    TypeError
        If ``reference_evals`` is None (to find duplicates within one pool,
        mask the diagonal of :func:`score_disagreement`'s distance), or
        ``threshold`` is not a number (a bool, a string, or the whole result
        of :func:`calibrate_score_threshold`: pass its ``.threshold``).
    ValueError
        If ``threshold`` is outside [0, 1], or a model of ``evals`` shares
        fewer than ``min_shared`` queries with every reference model (it is
        named, with the most it shares), be it one model or all of them.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from locus_sklearn.inspection import (
    ...     calibrate_score_threshold, match_models_by_scores)
    >>> rng = np.random.default_rng(0)
    >>> skill = {"llama": 0.7, "qwen": 0.6, "mistral": 0.5}
    >>> answers = {m: rng.random(200) < p for m, p in skill.items()}
    >>> queries = [f"q{i}" for i in range(200)]
    >>> known = pd.DataFrame({"model": np.repeat(list(skill), 200),
    ...                       "query": queries * 3,
    ...                       "score": np.concatenate(list(answers.values())) * 1.0})
    >>> # An endpoint serving qwen, with 5 % of its answers changed by sampling.
    >>> flips = rng.random(100) < 0.05
    >>> probe = pd.DataFrame({"model": "endpoint-1", "query": queries[:100],
    ...                       "score": (answers["qwen"][:100] ^ flips) * 1.0})
    >>> threshold = calibrate_score_threshold(
    ...     known, n_evals=100, false_match_rate=0.01, random_state=0).threshold
    >>> matches = match_models_by_scores(probe, known, threshold=threshold)
    >>> matches[["nearest", "n_shared", "is_match"]]
               nearest  n_shared  is_match
    endpoint-1    qwen       100      True
    """
    if reference_evals is None:
        # score_disagreement would compare evals with itself, where every
        # model is its own nearest model, at distance 0.
        raise TypeError(
            "reference_evals=None: match_models_by_scores needs the scored "
            "evaluations of the known models (a DataFrame or mapping of columns "
            "model, query, score). To find duplicates within evals, mask the "
            "diagonal of score_disagreement(evals).distance."
        )
    _check_threshold_kind(threshold, calibrator="calibrate_score_threshold")
    if not (0 <= threshold <= 1):
        raise ValueError(f"threshold={threshold!r} should be a number in [0, 1].")
    _check_min_shared(min_shared)
    # Not through score_disagreement: where no model of evals is comparable
    # its error names no model, and this one names each.
    table = check_evals(evals, name="evals")
    reference = check_evals(reference_evals, name="reference_evals")
    rate, common, n_both = _disagreement_on_shared(table, reference, False)
    result = _as_frames(rate, common, min_shared, table, reference)
    distance = result.distance.to_numpy()
    n_shared = result.n_shared.to_numpy()
    unmatched = np.isnan(distance).all(axis=1)
    if unmatched.any():
        names = result.distance.index[unmatched]
        most = n_shared[unmatched].max(axis=1)
        described = [
            f"{m} ({k} shared at most)" for m, k in zip(names, most, strict=True)
        ]
        # Where none is comparable, also what the two sides share at all.
        nothing = (
            " No pair between evals and reference_evals shares that many; "
            f"{n_both} queries appear on both sides."
            if unmatched.all()
            else ""
        )
        raise ValueError(
            f"{len(names)} model(s) of evals share fewer than min_shared="
            f"{min_shared} queries with every reference model: "
            f"{_preview(described)}.{nothing} "
            "Score them on the reference models' queries, or lower min_shared."
        )
    # Distances equal by hand are the same float (score_disagreement), so
    # nanargmin takes the first of tied models in sorted order.
    nearest = np.nanargmin(distance, axis=1)
    rows = np.arange(len(distance))
    best = distance[rows, nearest]
    # Names as objects, not pandas' inferred str dtype (lone surrogates).
    return _object_frame(
        {
            "nearest": result.distance.columns.to_numpy()[nearest],
            "distance": best,
            "n_shared": n_shared[rows, nearest],
            "is_match": best <= threshold,
        },
        index=pd.Index(result.distance.index.to_numpy(), dtype=object),
    )


def calibrate_score_threshold(
    evals,
    *,
    n_evals=128,
    n_resamples=20,
    false_match_rate=0.01,
    min_shared=32,
    random_state=None,
):
    """Disagreement under which a probe is taken to repeat a known model.

    A probe of an endpoint scores it on ``n_evals`` queries, and its
    disagreement with a known model is measured on those of them the model
    answered: a rate over about ``n_evals`` queries, noisier than the same
    rate between two known models over all their common queries. So each
    resample draws ``n_evals`` of the pool's queries at random and compares
    every pair of different known models on the ones both answered among
    them, as a probe would be compared (pairs sharing fewer than
    ``min_shared`` of them are skipped). The threshold lets a share
    ``false_match_rate`` of these different-model pairs through. It is
    read off their disagreements computed as :func:`score_disagreement`
    computes a distance (exactly, on the scores as written), which
    :func:`match_models_by_scores` compares with the threshold, so the
    realised rate is the one matching gives.

    What a true match looks like depends on the endpoint (the same weights
    repeat their answers; a model that samples its answers disagrees with
    itself): where two runs of one known model are at hand, their
    disagreement shows it.

    Parameters
    ----------
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of the known
        models, at least two.
    n_evals : int, default=128
        Queries per probe.
    n_resamples : int, default=20
        Random sets of ``n_evals`` queries.
    false_match_rate : float, default=0.01
        Target fraction of different-model pairs under the threshold; the
        realised rate never exceeds it.
    min_shared : int, default=32
        Pairs answering fewer of a set's queries in common are skipped, as
        :func:`match_models_by_scores` skips such reference models; at most
        ``n_evals``.
    random_state : int, RandomState instance or None, default=None
        Seeds the query sets.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``threshold`` (float; pass it to :func:`match_models_by_scores` with
        the same ``min_shared``), ``false_match_rate`` (the realised rate:
        the share of ``cross_distances`` that are ``<= threshold``),
        ``cross_distances`` (1-D array, the disagreement of every compared
        pair of every resample, as :func:`score_disagreement` computes it)
        and ``models``.

    Raises
    ------
    ValueError
        If the pool has fewer than two models or fewer than ``n_evals``
        queries, ``min_shared`` exceeds ``n_evals``, no pair of models
        shares ``min_shared`` queries of any set, or more than a share
        ``false_match_rate`` of the compared pairs are at distance 0 (no
        threshold >= 0 keeps them out).

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from locus_sklearn.inspection import calibrate_score_threshold
    >>> rng = np.random.default_rng(0)
    >>> known = pd.DataFrame({
    ...     "model": np.repeat(["m1", "m2", "m3", "m4"], 500),
    ...     "query": [f"q{i}" for i in range(500)] * 4,
    ...     "score": (rng.random(2000) < 0.6) * 1.0})
    >>> result = calibrate_score_threshold(known, n_evals=100, n_resamples=10,
    ...                                    false_match_rate=0.05, random_state=0)
    >>> result.cross_distances.shape  # 6 pairs x 10 sets of 100 queries
    (60,)
    >>> 0.2 < result.threshold < 0.5, result.false_match_rate <= 0.05
    (True, True)
    """
    for name, value in (("n_evals", n_evals), ("n_resamples", n_resamples)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise ValueError(f"{name}={value!r} should be an int >= 1.")
    if (
        isinstance(false_match_rate, bool)
        or not isinstance(false_match_rate, Real)
        or not 0 < false_match_rate < 1
    ):
        raise ValueError(
            f"false_match_rate={false_match_rate!r} should be a number in (0, 1)."
        )
    _check_min_shared(min_shared)
    validate_random_state(random_state, caller="calibrate_score_threshold")
    if min_shared > n_evals:
        raise ValueError(
            f"min_shared={min_shared} exceeds n_evals={n_evals}: no pair could be "
            "compared on a probe's queries. Lower min_shared or raise n_evals."
        )
    table = check_evals(evals, name="evals")
    if table.n_models < 2:
        raise ValueError(
            f"evals has {table.n_models} model; calibration compares pairs of "
            "different models and needs at least 2."
        )
    if table.n_queries < n_evals:
        raise ValueError(
            f"n_evals={n_evals} exceeds the {table.n_queries} queries of evals; "
            "lower n_evals to at most that."
        )
    rng = check_random_state(random_state)
    Y = table.to_dense()
    a, b = np.triu_indices(table.n_models, k=1)
    cross = []
    for _ in range(n_resamples):
        rows = rng.choice(table.n_queries, n_evals, replace=False)
        rate, common = disagreement(Y[rows])
        compared = common[a, b] >= min_shared
        cross.append(rate[a, b][compared])
    cross_distances = np.concatenate(cross)
    if not len(cross_distances):
        raise ValueError(
            f"No pair of models answered min_shared={min_shared} of any set of "
            f"n_evals={n_evals} random queries in common; score the known models "
            "on the same queries, raise n_evals or lower min_shared."
        )
    # The pairs are judged as match_models_by_scores judges a probe: on the
    # same exact distances, with distance <= threshold.
    threshold = match_threshold(cross_distances, false_match_rate)
    return Bunch(
        threshold=threshold,
        false_match_rate=float(np.mean(cross_distances <= threshold)),
        cross_distances=cross_distances,
        models=table.models.copy(),
    )
