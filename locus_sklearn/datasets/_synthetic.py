"""Synthetic model pools with known structure (families, task skills, sizes)."""

import math
import numbers

import numpy as np
import pandas as pd
from sklearn.utils import Bunch, check_random_state

from .._params import short_int, unrepresentable_int, validate_random_state
from .._repr import QueryEncodings
from ._loaders import _long_frame

__all__ = ["make_model_pool"]

# Scales of the generative model (standard deviations on the logit scale unless
# said otherwise). Fixed rather than exposed: they give a pool where routing has
# headroom and models of one family resemble each other; tune through n_tasks,
# n_families and noise.
_TASK_SPREAD = 0.6  # norm of a query's offset from its task centre (before unit norm)
_FAMILY_SKILL = 1.0  # family skill profile over tasks
_MODEL_SKILL = 0.3  # a model's own deviation from its family's profile
_FAMILY_DIRECTION = 1.0  # family direction in query-encoding space
_MODEL_DIRECTION = 0.5  # a model's own deviation from its family's direction
_SIZE_EFFECT = 1.0  # ability gained from the smallest to the largest size, halved
_FAMILY_ABILITY = 0.3
_MODEL_ABILITY = 0.3
_DIFFICULTY = 1.0
_LOG10_PARAMS = (0.0, np.log10(400.0))  # sizes log-uniform in [1, 400] billions


def _check_int(value, name, low):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int; got {value!r}.")
    if value < low:
        raise ValueError(f"{name}={short_int(value)} should be >= {low}.")
    # Past int64, numpy fails on the size or the index without naming it.
    why = unrepresentable_int(value, integral=True)
    if why is not None:
        raise ValueError(
            f"{name} must be an int in [{low}, {np.iinfo(np.int64).max}]; got "
            f"{short_int(value)}, {why}."
        )
    return int(value)


# Largest noise and specialist_boost, on the logit scale. Far past the point
# where every probability is 0 or 1 (a logit of 40 gives 1 - 4e-18), and far
# below where noise times a float32 normal draw would overflow float32.
_MAX_LOGIT_SCALE = 1e6


def _check_logit_scale(value, name):
    """``noise`` or ``specialist_boost`` as a float; refuse one that is not a
    real number in [0, _MAX_LOGIT_SCALE] (a bool is not one, nor is the str
    "0.5")."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"{name} must be a real number in [0, 1e6]; got "
            f"{type(value).__name__} {value!r}."
        )
    # A float before any check or use: np.isfinite refuses a Fraction or an
    # int past int64, 1e6 compared with a float16 overflows in the cast, and a
    # Fraction times a float32 array gives an array of objects.
    try:
        scale = float(value)
    except OverflowError:
        # 10**400, or a Fraction as large: its digits would bury the message.
        raise ValueError(
            f"{name} must be a finite number in [0, 1e6]; got "
            f"{type(value).__name__} beyond the float range (over 1.8e308)."
        ) from None
    if not (math.isfinite(scale) and 0 <= scale <= _MAX_LOGIT_SCALE):
        raise ValueError(f"{name} must be a finite number in [0, 1e6]; got {value!r}.")
    return scale


def _labels(prefix, n, min_width=1):
    """Zero-padded labels, so that sorting them keeps their index order."""
    width = max(min_width, len(str(n - 1)))
    return np.array([f"{prefix}{i:0{width}d}" for i in range(n)], dtype=object)


def _check_pool(
    n_models, n_queries, n_tasks, n_families, n_features, evals_per_model, noise
):
    """Validated sizes of :func:`make_model_pool`, with evaluations per model."""
    n_models = _check_int(n_models, "n_models", 1)
    n_queries = _check_int(n_queries, "n_queries", 1)
    n_tasks = _check_int(n_tasks, "n_tasks", 1)
    n_families = _check_int(n_families, "n_families", 1)
    n_features = _check_int(n_features, "n_features", 2)
    if n_families > n_models:
        raise ValueError(
            f"n_families={n_families} should be <= n_models={n_models}; every "
            "family needs at least one model."
        )
    if n_tasks > n_queries:
        raise ValueError(
            f"n_tasks={n_tasks} should be <= n_queries={n_queries}; every task "
            "needs at least one query."
        )
    if isinstance(evals_per_model, str):
        if evals_per_model != "all":
            raise ValueError(
                f"evals_per_model must be an int in [1, n_queries] or 'all'; got "
                f"{evals_per_model!r}."
            )
        n_evals = n_queries
    else:
        n_evals = _check_int(evals_per_model, "evals_per_model", 1)
        if n_evals > n_queries:
            raise ValueError(
                f"evals_per_model={n_evals} should be <= n_queries={n_queries} "
                "(a model is scored at most once per query), or 'all'."
            )
    noise = _check_logit_scale(noise, "noise")
    return n_models, n_queries, n_tasks, n_families, n_features, n_evals, noise


def _draw_models(rng, n_models, n_families, n_tasks, n_features):
    """Families, task skills, directions, sizes and abilities of the models.

    Families are contiguous blocks, so sorted names keep family order.
    """
    model_family = np.sort(np.arange(n_models) % n_families)
    profiles = _FAMILY_SKILL * rng.standard_normal((n_families, n_tasks))
    skills = profiles[model_family]
    skills = skills + _MODEL_SKILL * rng.standard_normal((n_models, n_tasks))
    directions = _FAMILY_DIRECTION * rng.standard_normal((n_families, n_features))
    directions = directions[model_family]
    directions = directions + _MODEL_DIRECTION * rng.standard_normal(
        (n_models, n_features)
    )
    log_size = rng.uniform(*_LOG10_PARAMS, size=n_models)
    middle, half = np.mean(_LOG10_PARAMS), np.ptp(_LOG10_PARAMS) / 2
    ability = (
        _SIZE_EFFECT * (log_size - middle) / half
        + _FAMILY_ABILITY * rng.standard_normal(n_families)[model_family]
        + _MODEL_ABILITY * rng.standard_normal(n_models)
    )
    return model_family, skills, directions, log_size, ability


def _check_specialties(n_specialties, n_tasks):
    """Validated ``n_specialties``."""
    n_specialties = _check_int(n_specialties, "n_specialties", 2)
    if n_specialties > n_tasks:
        raise ValueError(
            f"n_specialties={n_specialties} should be <= n_tasks={n_tasks}; "
            "every specialty needs at least one task."
        )
    if n_tasks % n_specialties:
        # Skills average 0 whatever k (the tasks of a specialty), but the
        # accuracy is their sigmoid: its mean over tasks depends on k, so
        # specialties of different sizes would not be equally good.
        raise ValueError(
            f"n_specialties={n_specialties} should divide n_tasks={n_tasks}; "
            "every specialty needs the same number of tasks for the "
            "specialists to have equal overall accuracy."
        )
    return n_specialties


def _specialist_skills(n_models, n_tasks, n_specialties, boost):
    """Zero-mean specialty skill profiles, shape (n_models, n_tasks), with the
    specialty of each task and of each model."""
    task_specialty = np.arange(n_tasks) * n_specialties // n_tasks
    model_specialty = np.arange(n_models) % n_specialties
    in_specialty = task_specialty[None, :] == model_specialty[:, None]
    k = in_specialty.sum(axis=1, keepdims=True)
    skills = np.where(
        in_specialty, float(boost), -float(boost) * k / np.maximum(n_tasks - k, 1)
    )
    return skills, task_specialty, model_specialty


def make_model_pool(
    n_models=40,
    n_queries=2000,
    *,
    n_tasks=8,
    n_families=5,
    evals_per_model=256,
    n_features=32,
    noise=0.5,
    binary=True,
    n_specialties=None,
    specialist_boost=1.5,
    random_state=None,
):
    """Generate a synthetic pool of models with known families and task skills.

    The data are **synthetic**: made for tests and experiments that need ground
    truth (true success probabilities, families, skills), not a stand-in for
    real LLMs. The generative model:

    - Queries belong to ``n_tasks`` tasks (balanced). A query's encoding is a
      unit vector around its task's random centre in ``n_features`` dimensions,
      so encodings cluster by task.
    - Models belong to ``n_families`` families (contiguous blocks, sizes within
      one). A family has a skill profile over tasks and a direction in
      encoding space; each model adds a small deviation to both, so models of
      one family are alike.
    - Each model has a size ``n_params`` (log-uniform in [1, 400] billions) and a
      general ability that grows with log-size plus family and model terms.
    - Each query has a difficulty. The true probability that model ``m``
      answers query ``q`` is
      ``sigmoid(ability_m + skill_{m, task(q)} + <w_m, x_q> - difficulty_q
      + noise * e_{qm})``, with ``x_q`` the query encoding, ``w_m`` the
      model's direction and ``e_{qm}`` standard normal: a part of each
      (model, query) outcome that no query feature predicts.
    - Every model is scored on its own random subset of ``evals_per_model``
      queries; a score is a Bernoulli draw of that probability
      (``binary=True``) or the probability itself.

    Different families are best on different tasks and the encoding tells the
    task, so routing on the encoding beats the best single model.

    With ``n_specialties`` set, the pool is one of *planted specialists of
    equal overall accuracy* instead: the tasks are split into
    ``n_specialties`` contiguous groups of ``k = n_tasks / n_specialties``
    tasks (a specialty each), model ``i`` (in name order) has specialty
    ``i % n_specialties``, and every model has the same general ability (0)
    and no direction term; its skill is ``+specialist_boost`` on the tasks of
    its specialty and ``-specialist_boost * k / (n_tasks - k)`` on the other
    tasks, so each model's skills average 0 over tasks. Models then differ
    only in *what* they are good at, not in how good they are; the nearest
    model of a specialist should be one of the same specialty, and routing by
    task reaches the task oracle.

    Parameters
    ----------
    n_models : int, default=40
        Number of models in the pool.
    n_queries : int, default=2000
        Number of queries.
    n_tasks : int, default=8
        Number of tasks; at most ``n_queries``.
    n_families : int, default=5
        Number of model families; at most ``n_models``.
    evals_per_model : int or "all", default=256
        Number of queries each model is scored on (a random subset per
        model), at most ``n_queries``; ``"all"`` scores every model on every
        query (a dense matrix).
    n_features : int, default=32
        Dimension of the query encodings; at least 2.
    noise : float, default=0.5
        Standard deviation of the per-(model, query) logit term that the
        encoding does not explain; in [0, 1e6] (from a few tens on, nearly every
        probability is 0 or 1).
    binary : bool, default=True
        If True, scores are 0/1 draws; if False, scores are the true
        probabilities (no sampling noise).
    n_specialties : int or None, default=None
        None for the family model above; an int in [2, n_tasks] that divides
        ``n_tasks`` plants specialists of equal overall accuracy (see above).
        The accuracy is equal in expectation where ``n_tasks`` also divides
        ``n_queries``; otherwise the first ``n_queries % n_tasks`` tasks have
        one query more, so the first specialties cover a few more queries
        (e.g. 668, 666 and 666 of 2000 for 6 tasks and 3 specialties) and
        their specialists' overall accuracy differs accordingly.
        Families are still drawn (names and ``family`` keep their meaning)
        but do not change the probabilities.
    specialist_boost : float, default=1.5
        Logit gained on the tasks of a model's specialty, in [0, 1e6]; only
        used with ``n_specialties`` (but always checked).
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible pools: an int in [0, 2**32 - 1] (not a bool),
        as the estimators take.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        With the following attributes.

        evals : DataFrame of shape (n_models * evals_per_model, 4)
            Columns ``model``, ``query``, ``score`` and ``task``, sorted by
            model, then query.
        encodings : dict of str to ndarray of shape (n_features,)
            Query id -> float32 unit vector, for every query. Usable as
            ``encoder=``. A ``dict`` subclass that prints as its size
            (``QueryEncodings(50 queries x 8)``), so that the repr of an
            estimator or pipeline holding it stays short and fast.
        probabilities : DataFrame of shape (n_queries, n_models)
            True probabilities of a correct answer, indexed by query with one
            column per model (also for cells not in ``evals``).
        models : DataFrame of shape (n_models, 4)
            Columns ``model`` (e.g. ``"fam2-m07"``), ``family``, ``n_params``
            (billions) and ``ability``, sorted by model name.
        queries : DataFrame of shape (n_queries, 3)
            Columns ``query`` (e.g. ``"q0042"``), ``task`` and ``difficulty``,
            sorted by query.
        tasks : ndarray of str of shape (n_tasks,)
            Task names, sorted.
        skills : ndarray of shape (n_models, n_tasks)
            Skill of each model (rows as ``models``) on each task (columns as
            ``tasks``).
        family : dict of str to str
            Model -> family name.
        n_params : dict of str to float
            Model -> billions of parameters.
        specialty : dict of str to int
            Only with ``n_specialties``: model -> its specialty (also a
            ``specialty`` column of ``models``, and ``queries`` gets the
            ``specialty`` its task belongs to).

    Examples
    --------
    >>> from locus_sklearn.datasets import make_model_pool
    >>> data = make_model_pool(n_models=6, n_queries=50, n_tasks=2, n_families=2,
    ...                        evals_per_model=10, n_features=8, random_state=0)
    >>> data.evals.shape
    (60, 4)
    >>> data.models["model"].tolist()
    ['fam0-m00', 'fam0-m01', 'fam0-m02', 'fam1-m03', 'fam1-m04', 'fam1-m05']
    >>> data.probabilities.shape, data.skills.shape
    ((50, 6), (6, 2))
    >>> data.encodings["q00"].shape
    (8,)
    >>> data.encodings
    QueryEncodings(50 queries x 8)
    """
    n_models, n_queries, n_tasks, n_families, n_features, n_evals, noise = _check_pool(
        n_models, n_queries, n_tasks, n_families, n_features, evals_per_model, noise
    )
    if not isinstance(binary, (bool, np.bool_)):
        raise TypeError(f"binary must be a bool; got {binary!r}.")
    # Checked even when unused, as every other parameter: a bad value should
    # not wait for n_specialties to surface.
    specialist_boost = _check_logit_scale(specialist_boost, "specialist_boost")
    if n_specialties is not None:
        n_specialties = _check_specialties(n_specialties, n_tasks)
    validate_random_state(random_state, caller="make_model_pool")
    # A Generator seeded from the sklearn-style random_state: its normals are
    # several times faster than RandomState's on large pools.
    seed = check_random_state(random_state).randint(np.iinfo(np.int32).max)
    rng = np.random.default_rng(seed)

    # Queries: balanced tasks, encodings around unit task centres.
    query_task = rng.permutation(np.arange(n_queries) % n_tasks)
    centres = rng.standard_normal((n_tasks, n_features))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    offsets = rng.standard_normal((n_queries, n_features))
    offsets *= _TASK_SPREAD / np.sqrt(n_features)
    encodings = centres[query_task] + offsets
    encodings /= np.linalg.norm(encodings, axis=1, keepdims=True)
    difficulty = _DIFFICULTY * rng.standard_normal(n_queries)

    model_family, skills, directions, log_size, ability = _draw_models(
        rng, n_models, n_families, n_tasks, n_features
    )

    if n_specialties is not None:
        # Same draws as the default pool above (so the queries are the same),
        # then every model's ability and direction are levelled and its skills
        # replaced by a zero-mean specialty profile.
        skills, task_specialty, model_specialty = _specialist_skills(
            n_models, n_tasks, n_specialties, specialist_boost
        )
        directions = np.zeros_like(directions)
        ability = np.zeros_like(ability)

    logits = encodings @ directions.T  # (n_queries, n_models)
    logits += ability
    logits += skills[:, query_task].T
    logits -= difficulty[:, None]
    if noise > 0:
        logits += noise * rng.standard_normal(logits.shape, dtype=np.float32)
    # exp overflows to inf for logits below about -709 (a large noise or
    # boost); 1 / (1 + inf) = 0 is then the right probability.
    with np.errstate(over="ignore"):
        probabilities = 1.0 / (1.0 + np.exp(-logits))

    # Each model's own subset of queries, in query order.
    if n_evals == n_queries:
        picked = np.broadcast_to(np.arange(n_queries), (n_models, n_queries))
    else:
        keys = rng.random((n_models, n_queries), dtype=np.float32)
        picked = np.sort(np.argpartition(keys, n_evals - 1, axis=1)[:, :n_evals], 1)
    model_index = np.repeat(np.arange(n_models), n_evals)
    query_index = picked.ravel()
    p = probabilities[query_index, model_index]
    score = (rng.random(p.shape) < p).astype(np.float64) if binary else p

    models = _labels("m", n_models, min_width=2)
    families = _labels("fam", n_families)
    models = families[model_family] + "-" + models
    queries = _labels("q", n_queries, min_width=2)
    tasks = _labels("task", n_tasks)
    evals = _long_frame(
        {
            "model": models[model_index],
            "query": queries[query_index],
            "score": score,
            "task": tasks[query_task[query_index]],
        }
    )
    encodings = encodings.astype(np.float32)
    n_params = np.round(10.0**log_size, 2)
    model_frame = pd.DataFrame(
        {
            "model": models,
            "family": families[model_family],
            "n_params": n_params,
            "ability": ability,
        }
    )
    query_frame = pd.DataFrame(
        {"query": queries, "task": tasks[query_task], "difficulty": difficulty}
    )
    extra = {}
    if n_specialties is not None:
        model_frame["specialty"] = model_specialty
        query_frame["specialty"] = task_specialty[query_task]
        extra["specialty"] = dict(zip(models, model_specialty.tolist(), strict=True))
    return Bunch(
        evals=evals,
        # Printed as its size, not every vector (see QueryEncodings).
        encodings=QueryEncodings(zip(queries, encodings, strict=True)),
        probabilities=pd.DataFrame(
            probabilities,
            index=pd.Index(queries, name="query"),
            columns=pd.Index(models, name="model"),
        ),
        models=model_frame,
        queries=query_frame,
        tasks=tasks,
        skills=skills,
        family=dict(zip(models, families[model_family], strict=True)),
        n_params=dict(zip(models, n_params.tolist(), strict=True)),
        **extra,
    )
