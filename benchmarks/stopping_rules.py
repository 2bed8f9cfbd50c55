"""Early stopping's patience: every value on one training run.

``LocusEmbedder(early_stopping="valid_loss")`` stops after ``patience``
epochs without a new best validation loss and restores the best epoch's
weights (skorch's ``EarlyStopping``). When it stops, and which epoch it
restores, follow from the validation-loss curve alone, and a shorter patience
stops no later than a longer one on the same curve. So one fit at the longest
patience, keeping every epoch's weights, gives exactly the fit that each
shorter patience would have given (:func:`stopping_point` replays skorch's
rule): every value is compared on the same run, the same rows and the same
random stream.

Per pool and seed the embedder is fitted at the package's defaults (not the
embedding benchmark's quick settings) on the routing benchmark's training rows
(``--n``: 256 per model, or ``all``) less a seeded fifth of their queries, held
out as *selection* queries. For each patience in ``PATIENCES`` it records the epochs run, their
summed duration, the restored epoch, the log-loss of P(correct) on the
selection rows (each model embedded from its fitting rows; the measure a
choice reads) and the test queries' routing accuracy, plain and with the
default shrinkage (reported, never read for a choice).

The pool ``speed`` is ``core_speed.py --fit``'s (112 synthetic models x 1,024
evaluations, 8,000 queries, seeded by the seed) fitted on all of its rows, as
there; its quality measure is the log-loss against the pool's true P(correct)
at every (query, model) pair, most of them at queries the model never
answered.

Usage: python benchmarks/stopping_rules.py
       --pools bfcl mmlu-open mmlu-all shaberi routerbench speed
       [--n 256 | all] [--seeds 0 1 2] [--threads 1] [--tag T]
"""

import contextlib
import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from refine_solver import command_line  # noqa: E402
from sklearn.frozen import FrozenEstimator  # noqa: E402
from skorch.callbacks import Callback  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter, _training  # noqa: E402
from locus_sklearn.metrics import correctness_log_loss, routing_accuracy  # noqa: E402

#: The patience values compared; the largest is the one the fit runs at.
PATIENCES = (10, 7, 5, 3)
#: skorch's relative threshold, as the embedder's training sets it.
THRESHOLD = _training.EARLY_STOPPING_THRESHOLD
SELECTION_FRACTION = 0.2


def stopping_point(losses, patience, threshold=THRESHOLD):
    """(epochs run, restored epoch), 1-based, of skorch's ``EarlyStopping``
    (``lower_is_better``, relative threshold, ``load_best``) on a curve.

    Examples
    --------
    >>> stopping_point([1.0, 0.9, 0.95, 0.96, 0.97], patience=2)
    (4, 2)
    >>> stopping_point([1.0, 0.9, 0.8], patience=2)  # never stops: the last
    (3, 3)
    """
    bar, best, misses = np.inf, 0, 0
    for epoch, loss in enumerate(losses, start=1):
        if loss < bar:
            bar, best, misses = loss - threshold * loss, epoch, 0
        else:
            misses += 1
            if misses == patience:
                return epoch, best
    return len(losses), best


class KeepWeights(Callback):
    """Keep a copy of the network's weights at the end of every epoch."""

    def initialize(self):
        self.states_ = []
        return self

    def on_epoch_end(self, net, **kwargs):
        self.states_.append(copy.deepcopy(net.module_.state_dict()))


@contextlib.contextmanager
def keeping_weights():
    """Fits inside append a :class:`KeepWeights` to the training callbacks;
    yields the list its instances are appended to."""
    kept, original = [], _training._callbacks

    def callbacks(params, valid_ds, n_models, bank):
        keep = KeepWeights()
        kept.append(keep)
        return original(params, valid_ds, n_models, bank) + [("keep_weights", keep)]

    _training._callbacks = callbacks
    try:
        yield kept
    finally:
        _training._callbacks = original


def _pool(name, seed, n):
    """(encodings, fit rows, selection rows or None, test split or None, truth)."""
    if name == "speed":
        from locus_sklearn.datasets import make_model_pool

        pool = make_model_pool(
            n_models=112, n_queries=8000, evals_per_model=1024, n_features=384,
            random_state=seed,
        )  # fmt: skip
        return pool.encodings, pool.evals, None, None, pool.probabilities
    data = eq.load_pool(name, seed)
    split = routing.Split(data, seed)
    train = split.training_rows(n)
    queries = np.sort(train["query"].unique().astype(str))
    rng = np.random.default_rng([seed, 29])
    held = rng.choice(queries, int(round(SELECTION_FRACTION * len(queries))), False)
    is_held = train["query"].isin(set(held)).to_numpy()
    return data.encodings, train[~is_held], train[is_held], split, None


def _measures(embedder, fit_rows, selection, split, truth):
    out = {}
    plain = LocusRouter(FrozenEstimator(embedder), shrinkage=None).fit(fit_rows)
    models = list(plain.classes_)
    if truth is not None:
        proba = plain.predict_proba(list(truth.index))
        true = truth[models].to_numpy()
        out["true_log_loss"] = correctness_log_loss(true, proba)
        return out
    sel_queries = np.unique(selection["query"].astype(str))
    proba = plain.predict_proba(list(sel_queries))
    row = np.searchsorted(sel_queries, selection["query"].astype(str))
    col = np.searchsorted(models, selection["model"])
    out["selection_log_loss"] = correctness_log_loss(
        selection["score"].to_numpy()[None], proba[row, col][None]
    )
    default = LocusRouter(FrozenEstimator(embedder)).fit(fit_rows)
    for key, router in (("plain", plain), ("default", default)):
        proba = router.predict_proba(list(split.test_queries))
        assert list(router.classes_) == list(split.models)
        out[f"test_routing_{key}"] = routing_accuracy(split.y_test, proba)
    out["shrinkage"] = float(default.shrinkage_)
    return out


def run(pool, seed, args, log):
    encodings, fit_rows, selection, split, truth = _pool(pool, seed, args.n)
    embedder = LocusEmbedder(encodings, patience=max(PATIENCES), random_state=seed)
    with keeping_weights() as kept:
        embedder.fit(fit_rows)
    history = embedder.net_.history
    losses = [float(v) for v in history[:, "valid_loss"]]
    durations = [float(v) for v in history[:, "dur"]]
    seconds = np.cumsum(durations)
    out = {"valid_loss": losses, "epoch_seconds": durations}
    out["rules"] = {}
    for patience in PATIENCES:
        ran, best = stopping_point(losses, patience)
        embedder.net_.module_.load_state_dict(kept[0].states_[best - 1])
        rule = {"epochs": ran, "restored": best, "seconds": float(seconds[ran - 1])}
        rule.update(_measures(embedder, fit_rows, selection, split, truth))
        out["rules"][str(patience)] = rule
        log(
            f"{pool} seed {seed} patience {patience:2d}: {ran:3d} epochs "
            f"({rule['seconds']:.0f} s), restored {best:3d}, "
            + ", ".join(f"{k} {v:.4f}" for k, v in rule.items() if isinstance(v, float))
        )
    return out


def _n(value):
    return value if value == "all" else int(value)


def main(argv=None):
    command_line(
        __doc__, "stopping_rules", run, argv,
        add_arguments=lambda p: p.add_argument("--n", type=_n, default=256),
        header=lambda args: {
            "patiences": list(PATIENCES), "threshold": THRESHOLD, "n": args.n,
        },
    )  # fmt: skip


if __name__ == "__main__":
    main()
