"""``locus demo``: route, onboard and pick a portfolio on real data, in minutes.

On the built-in MMLU-Pro subset (or a user's evaluation file) the demo splits the
queries 80/20, trains a :class:`~locus_sklearn.LocusRouter` on all but a few
held-out models, compares its routing accuracy on the test queries with the
single best model, the oracle and a kNN router, onboards the held-out models
from 128 evaluations each, picks a small portfolio, and writes figures.
"""

import io
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ._errors import EXIT_IO, CommandError, interrupts_kept
from ._io import (
    _write_failure,
    expanded,
    format_table,
    printable,
    progress_to_stderr,
)

__all__ = ["run_demo", "DEMO_SETTINGS", "QUICK_SETTINGS"]

#: LocusEmbedder settings of the demo: a smaller network and shorter episodes
#: than the defaults, so that training takes under a minute on two CPU cores
#: (14 epochs in 18 s on one thread, the default; longer on a busy machine).
#: Everything else (regularisation, early stopping) is the library's default.
DEMO_SETTINGS = dict(
    embedding_dim=64,
    n_latents=16,
    n_blocks=1,
    enc_size=(64, 512),
    dec_size=128,
    max_epochs=40,
    episodes_per_epoch=256,
)

#: Tiny settings for ``locus demo --quick`` (a smoke test: seconds, not accuracy).
QUICK_SETTINGS = dict(
    embedding_dim=16,
    n_latents=4,
    n_blocks=1,
    n_heads=2,
    hidden_dim=16,
    enc_size=(32, 128),
    dec_size=32,
    max_epochs=2,
    episodes_per_epoch=32,
    early_stopping=None,
)

N_ONBOARD_EVALS = 128  # evaluations per onboarded model, as in the paper
N_HELD_OUT = 3  # models held out of training, then onboarded
PORTFOLIO_SIZE = 5
MIN_COMMON_QUERIES = 50  # below this, score on every test query instead


class _Printer:
    """Print to a stream with flushing (the demo interleaves with skorch's log),
    what is not printable (a model name from --evals) escaped."""

    def __init__(self, stream):
        self.stream = stream

    def __call__(self, *lines):
        for line in lines:
            print(printable(line), file=self.stream, flush=True)


def _table(header, rows):
    """An aligned table (list of lines): first column left, the others right."""
    aligns = ["<"] + [">"] * (len(header) - 1)
    return format_table(header, rows, aligns=aligns, indent="  ")


def _count(n, noun):
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 model", "3 models"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _names(models, limit=5):
    """Up to ``limit`` model names, comma-separated, for a message."""
    models = list(models)
    more = f", ... ({len(models)} in all)" if len(models) > limit else ""
    return ", ".join(models[:limit]) + more


def _load(evals_path, open_weights):
    """Return (evals, encodings, family, description) for the demo's data;
    encodings is None for a user's file (see :func:`_encode`)."""
    from ..datasets import load_mmlu_pro

    if evals_path is None:
        data = load_mmlu_pro(open_weights_only=open_weights)
        which = "27 open-weights models" if open_weights else "all 32 models"
        description = (
            f"MMLU-Pro subset (built in): {which}, {data.evals['query'].nunique():,} "
            f"questions, {len(data.evals):,} evaluations"
        )
        # The precomputed MiniLM encodings: nothing is encoded at demo time.
        return data.evals, data.encodings, data.family, description
    from ._io import read_evals

    # The commands' reader: its errors name the file (and row), not parameters.
    evals = read_evals(evals_path)
    n_models = evals["model"].nunique()
    if n_models < 2:
        # Routing, onboarding and portfolios all compare models.
        raise ValueError(
            f"--evals {os.fspath(evals_path)!r} has {n_models} model; the demo "
            "routes among models and needs at least 2."
        )
    n_rows = len(evals)
    # Repeated (model, query) rows are averaged, as the estimators would;
    # here, once, so that every count the demo prints is of distinct ones.
    how = {"score": "mean", **({"task": "first"} if "task" in evals else {})}
    evals = evals.groupby(["model", "query"], as_index=False, sort=False).agg(how)
    repeated = (
        f" ({n_rows - len(evals):,} repeated (model, query) rows averaged)"
        if n_rows > len(evals)
        else ""
    )
    description = (
        f"{os.fspath(evals_path)}: {evals['model'].nunique():,} models, "
        f"{evals['query'].nunique():,} queries, {len(evals):,} evaluations"
        f"{repeated}"
    )
    return evals, None, None, description


def _encode(evals, say):
    """Encodings of the queries of a user's file with the bundled MiniLM."""
    from .._encoders import QueryEncoder

    queries = np.sort(evals["query"].unique())
    say(f"Encoding {len(queries):,} queries with the bundled all-MiniLM-L6-v2 ...")
    vectors = QueryEncoder(show_progress_bar=True).fit().transform(queries)
    # Encode once; the router and the kNN peer share the vectors.
    return dict(zip(queries, vectors, strict=True))


def _split(evals, rng):
    """Seeded 80/20 split of the distinct queries; returns (train, test) frames."""
    queries = np.sort(evals["query"].unique())
    n_test = max(1, int(round(0.2 * len(queries))))
    test = set(queries[rng.permutation(len(queries))[:n_test]])
    is_test = evals["query"].isin(test).to_numpy()
    return evals[~is_test], evals[is_test]


def _held_out_models(train, test, rng, n_held_out):
    """Models to hold out of training: random, among those with enough
    training rows to onboard from and test rows to score them on."""
    counts = train["model"].value_counts()
    enough = counts.index[counts >= N_ONBOARD_EVALS]
    eligible = np.sort(enough[enough.isin(test["model"].unique())].to_numpy())
    n_held_out = min(n_held_out, max(0, counts.size - 3))  # keep a pool to train on
    if len(eligible) < n_held_out or n_held_out == 0:
        return []
    return sorted(rng.choice(eligible, n_held_out, replace=False).tolist())


def _dense(evals, models):
    """(queries, score matrix with NaN) of ``evals`` over ``models``."""
    from .._evals import check_evals

    table = check_evals(evals)
    return table.queries, table.to_dense(models)


def _common(test, models):
    """Test rows of ``models`` on the queries that every one of them answered."""
    part = test[test["model"].isin(models)]
    counts = part.groupby("query")["model"].nunique()
    common = counts.index[counts == len(models)]
    return part[part["query"].isin(common)]


def _route_stats(proba, Y):
    """Routing accuracy (among the models scored per query) and models used."""
    from ..metrics import route, routing_accuracy

    routed = route(proba, ~np.isnan(Y))
    return routing_accuracy(Y, proba), len(np.unique(routed))


def _pyplot():
    """matplotlib's pyplot, or None if it is not installed.

    The backend is left as it is: the demo also runs in the caller's process
    (``main(["demo", ...])``), whose backend switching to Agg changed.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _os_reason(exc, output):
    """The OS's reason of ``exc``, with the path it concerns unless that is
    ``output`` (which the message names already)."""
    reason = exc.strerror or str(exc)
    if exc.filename is None or os.fspath(exc.filename) in (
        os.fspath(output),
        expanded(output),
    ):
        return reason
    return f"{reason}: {os.fspath(exc.filename)!r}"


def _create_output(output):
    """Create the figures' folder ``output`` (a leading ``~`` expanded) and
    its missing parents, with an error in --output's terms; return the
    folder and the folders created, deepest first."""
    created = []
    folder = target = Path(expanded(output))
    while not os.path.lexists(folder) and folder != folder.parent:
        created.append(folder)
        folder = folder.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(
            f"cannot create the folder --output {str(output)!r}: "
            f"{_os_reason(exc, output)}; give a folder that this process can "
            "create and write into.",
            status=EXIT_IO,
        ) from exc
    return target, created


def _check_output(output):
    """Fail before any work if the folder ``output`` cannot be created, also
    where the command line's check cannot tell (root under /proc or /sys
    passes its access check): by creating it, then removing what was
    created, so that a run that fails later leaves no empty folder."""
    for folder in _create_output(output)[1]:
        try:
            folder.rmdir()
        except OSError:  # no longer empty: keep it, and its parents
            break


def _figures(router, family, portfolio, held_out, curves, output, say):
    """Write the model map, dendrogram and portfolio curve; return file names."""
    plt = _pyplot()
    if plt is None:
        say("  matplotlib is not installed: skipping figures (pip install matplotlib).")
        return []
    from matplotlib.figure import Figure

    from .._files import write_bytes  # imports torch: only when needed
    from ..inspection import plot_model_dendrogram, plot_model_map, plot_portfolio_curve

    folder, _ = _create_output(output)
    names = router.classes_
    written = []

    def save(fig, name):
        # Rendered first, then written atomically as every output of the
        # command: a failed write (a full disk) leaves last run's figure whole,
        # where savefig into the file left it cut short.
        image = io.BytesIO()
        fig.savefig(image, dpi=120, format="png")
        try:
            write_bytes(folder / name, image.getvalue())
        except OSError as exc:  # named in --output's terms
            raise CommandError(
                f"could not write {name} into --output {str(output)!r}: "
                f"{_write_failure(exc)}",
                status=EXIT_IO,
            ) from exc
        written.append(name)

    # The figures are the demo's own: Figure objects, which pyplot neither
    # shows nor keeps, where the demo may run in the caller's process (its
    # figures, open in pyplot, are left alone).
    groups = None if family is None else [family.get(m, "?") for m in names]
    ax = Figure(figsize=(9.0, 7.0), layout="constrained").subplots()
    plot_model_map(router, groups=groups, ax=ax)
    for i, name in enumerate(names):
        # Mark onboarded models (never trained on) and the portfolio; a model
        # that is both gets both, the star inside the larger square.
        xy = ax.texts[i].xy
        if name in held_out:
            ax.plot(*xy, marker="s", ms=18, mfc="none", mec="black")
        if name in portfolio:
            ax.plot(*xy, marker="*", ms=14, mfc="none", mec="black")
    ax.set_title(
        "Model map (PCA of LOCUS embeddings)\n"
        f"square: onboarded from {N_ONBOARD_EVALS} evaluations; star: portfolio"
    )
    save(ax.figure, "model_map.png")

    # plot_model_dendrogram makes its figure with pyplot: not shown (in
    # interactive mode a new figure is), and closed once saved.
    with plt.ioff():
        fig = plot_model_dendrogram(router, metric="cosine")
        try:
            fig.suptitle("Models clustered by LOCUS embedding (cosine distance)")
            save(fig, "model_dendrogram.png")
        finally:
            plt.close(fig)

    # plot_portfolio_curve's own size.
    ax = Figure(figsize=(6.0, 4.0), layout="constrained").subplots()
    plot_portfolio_curve(
        curves["expected"], ax=ax, label="chosen for expected routing accuracy"
    )
    plot_portfolio_curve(
        curves["k-medoids"], ax=ax, label="k-medoids on embeddings",
        random=False, full_pool=False,
    )  # fmt: skip
    ax.legend()
    ax.set_title("Routing accuracy restricted to a portfolio (test questions)")
    save(ax.figure, "portfolio_curve.png")
    return written


def _left_out(evals, counts, pool, held_out):
    """Models neither trained on nor held out, each with why: "a (only test
    queries)", "b (1 training query)"."""
    out = []
    for name in np.sort(evals["model"].unique()):
        if name in pool or name in held_out:
            continue
        n = int(counts.get(name, 0))
        out.append(f"{name} ({'only test queries' if n == 0 else '1 training query'})")
    return out


def _check_pool(source, demo, left_out):
    """Refuse, before any work, a split that leaves fewer than 2 models to
    train on or none of them a test query to score the routers on."""
    n_train, n_test = demo.train["query"].nunique(), demo.test["query"].nunique()
    split = f"the seeded 80/20 split of its queries (--seed {demo.seed})"
    dropped = f"; left out: {_names(left_out)}" if left_out else ""
    if len(demo.pool) < 2:
        found = f"only 1 ({_names(demo.pool)})" if len(demo.pool) else "none"
        raise ValueError(
            f"{source}: the demo trains a router among the models with 2 or "
            f"more scores on the {n_train:,} training queries of {split}, and "
            f"needs at least 2; there is {found}{dropped}. Give more models "
            "scores on the same queries."
        )
    if not demo.test["model"].isin(demo.pool).any():
        raise ValueError(
            f"{source}: none of the {len(demo.pool)} models the demo trains on "
            f"({_names(demo.pool)}) has a score on the {n_test:,} test queries of "
            f"{split}, on which it scores the routers{dropped}. Give them scores "
            "on more of the same queries."
        )


class _Demo:
    """The data of one demo run, shared by its steps."""

    def __init__(self, evals, open_weights, seed, say):
        self.say = say
        self.seed = seed
        self.rng = np.random.RandomState(seed)
        self.evals, self.encoder, self.family, description = _load(evals, open_weights)
        self.train, self.test = _split(self.evals, self.rng)
        train = self.train
        # A model needs 2 training rows to be trained on (one to encode, one
        # to predict); one with fewer is left out, and said so below.
        counts = train["model"].value_counts()
        trainable = counts.index[counts >= 2]
        self.held_out = _held_out_models(
            train[train["model"].isin(trainable)], self.test, self.rng, N_HELD_OUT
        )
        self.pool = np.sort(trainable[~trainable.isin(self.held_out)].to_numpy())
        self.pool_train = train[train["model"].isin(self.pool)]
        left_out = _left_out(self.evals, counts, self.pool, self.held_out)
        source = (
            "the built-in data" if evals is None else f"--evals {os.fspath(evals)!r}"
        )
        _check_pool(source, self, left_out)
        if self.encoder is None:
            self.encoder = _encode(self.evals, say)
        say(
            f"LOCUS demo on {description}.",
            f"Split (seed {seed}): {train['query'].nunique():,} training / "
            f"{self.test['query'].nunique():,} test queries.",
        )
        if left_out:
            say(
                f"Left out, too few training scores to train on: {', '.join(left_out)}."
            )
        if self.held_out:
            say(f"Held out of training, to onboard later: {', '.join(self.held_out)}.")
        say("")


def _train(demo, settings):
    """Step 1: fit a LocusRouter on the pool; return (router, seconds)."""
    from .. import LocusEmbedder, LocusRouter

    embedder = LocusEmbedder(
        demo.encoder, random_state=demo.seed, verbose=1, **settings
    )
    # What the embedder will do (the library's defaults where the settings
    # leave them), so that the line says how training ends.
    early = (
        f", early stopping on {embedder.early_stopping}, patience {embedder.patience}"
        if embedder.early_stopping and embedder.validation_fraction
        else ""
    )
    demo.say(
        f"[1/4] Training a LocusRouter on {len(demo.pool)} models "
        f"({len(demo.pool_train):,} evaluations; at most {embedder.max_epochs} "
        f"epochs, {embedder.episodes_per_epoch} episodes each{early})"
    )
    t0 = time.perf_counter()
    # The epoch table is progress, not the report. skorch ends a fit at
    # Ctrl-C and keeps what it trained: interrupts_kept stops the demo too.
    with progress_to_stderr(), interrupts_kept():
        router = LocusRouter(embedder).fit(demo.pool_train)
    fit_time = time.perf_counter() - t0
    demo.say(
        f"  trained {router.embedder_.n_epochs_} epochs in {fit_time:.0f} s; "
        f"shrinkage toward each model's mean score chosen at fit: "
        f"{router.shrinkage_:g} (1 routes like the single best model)",
        "",
    )
    return router, fit_time


def _compare_routers(demo, router):
    """Step 2: routing accuracy against the oracle, kNN and the single best."""
    from ..baselines import KNNRouter

    pool, test = demo.pool, demo.test
    scored = _common(test, pool)
    n_common = scored["query"].nunique()
    where = f"the {n_common:,} test queries that all {len(pool)} models answered"
    if scored["query"].nunique() < MIN_COMMON_QUERIES:
        scored = test[test["model"].isin(pool)]
        where = (
            f"all {scored['query'].nunique():,} test queries (each routed among "
            "the models with a score for it)"
        )
    queries, Y = _dense(scored, router.classes_)
    locus_acc, locus_used = _route_stats(router.predict_proba(queries), Y)

    oracle_acc = float(np.nanmax(Y, axis=1).mean())
    # A model with fewer than k training queries uses all of them: k is at
    # most the largest count, so that the label gives the k used.
    k = min(50, int(demo.pool_train["model"].value_counts().max()))
    knn = KNNRouter(k=k, encoder=demo.encoder).fit(demo.pool_train)
    knn_acc, knn_used = _route_stats(knn.predict_proba(queries), Y)
    # The single best is a router too: every query to the model of the best
    # training mean among those scored on it, as the others are routed (on
    # sparse test rows the best model's own queries would be other queries).
    train_means = demo.pool_train.groupby("model")["score"].mean()
    means = train_means.reindex(router.classes_).to_numpy()
    has_scores = ~np.isnan(Y).all(axis=0)
    # Named: the best of the models scored on these queries (one that is
    # scored on none is never routed to).
    best = router.classes_[int(np.argmax(np.where(has_scores, means, -np.inf)))]
    best_acc, best_used = _route_stats(np.tile(means, (len(queries), 1)), Y)
    label = f"single best model ({best}, chosen on train"
    if not has_scores[int(np.argmax(means))]:
        label += " among the models with test scores"
    label += ")" if best_used == 1 else "; the next where it has no score)"
    rows = [
        ("oracle (best model per query)", f"{oracle_acc:.3f}", ""),
        ("LocusRouter", f"{locus_acc:.3f}", locus_used),
        (f"KNNRouter (k={k}), a peer router", f"{knn_acc:.3f}", knn_used),
        (label, f"{best_acc:.3f}", best_used),
        ("average model", f"{np.nanmean(Y[:, has_scores], axis=0).mean():.3f}", ""),
    ]
    demo.say(
        f"[2/4] Routing accuracy on {where}:",
        *_table(["router", "accuracy", "models used"], rows),
        "",
    )
    return dict(
        locus_accuracy=locus_acc,
        knn_accuracy=knn_acc,
        single_best_accuracy=best_acc,
        oracle_accuracy=oracle_acc,
    )


def _onboard_rows(demo):
    """N_ONBOARD_EVALS random training rows of each held-out model."""
    parts = []
    for name in demo.held_out:
        rows_m = demo.train[demo.train["model"] == name]
        pick = demo.rng.choice(len(rows_m), N_ONBOARD_EVALS, replace=False)
        parts.append(rows_m.iloc[np.sort(pick)])
    return pd.concat(parts)


def _onboard(demo, router):
    """Step 3: onboard the held-out models; their correctness accuracy."""
    from ..metrics import correctness_accuracy

    held_out, train, test = demo.held_out, demo.train, demo.test
    if not held_out:
        demo.say(
            "[3/4] Onboarding skipped: too few models or evaluations to hold some out.",
            "",
        )
        return {"onboarding_accuracy": None}
    each, their = (" each", "their") if len(held_out) > 1 else ("", "its")
    demo.say(
        f"[3/4] Onboarding the {_count(len(held_out), 'held-out model')} from "
        f"{N_ONBOARD_EVALS} evaluations{each} (no training); correctness "
        f"accuracy on {their} test queries:"
    )
    onboard = _onboard_rows(demo)
    t0 = time.perf_counter()
    router.add_models(onboard)
    onboard_time = time.perf_counter() - t0
    held_out_train = train[train["model"].isin(held_out)]
    full = router.embed(held_out_train)
    rows, results = [], {}
    for i, name in enumerate(held_out):
        test_m = test[test["model"] == name]
        y = test_m["score"].to_numpy()[:, None]
        q = test_m["query"].tolist()
        col = int(np.flatnonzero(router.classes_ == name)[0])
        # LOCUS's prediction from each embedding alike, without the router's
        # shrinkage toward the model's mean score: blended, the 128 column
        # read mostly (at shrinkage 1, only) the mean of the 128 scores.
        p128 = router.embedder_.predict_proba(
            router.model_embeddings_[[col]], q,
            evals=onboard[onboard["model"] == name],
        )  # fmt: skip
        p_all = router.embedder_.predict_proba(
            full[[i]], q, evals=held_out_train[held_out_train["model"] == name]
        )
        # The class that is right most often under the threshold the metric
        # scores with (y >= 0.5): on graded scores the mean score can be
        # >= 0.5 while most scores are below it (1/3 at 1.0, 2/3 at 0.4).
        scores = onboard.loc[onboard["model"] == name, "score"].to_numpy()
        majority = np.mean(scores >= 0.5) >= 0.5
        acc128 = correctness_accuracy(y, p128)
        acc_all = correctness_accuracy(y, p_all)
        acc_const = float(np.mean((y >= 0.5) == bool(majority)))
        results[name] = acc128
        rows.append(
            (
                name,
                f"{len(test_m):,}",
                f"{acc128:.3f}",
                f"{acc_all:.3f}",
                f"{acc_const:.3f}",
            )
        )
    n_all = int(held_out_train.groupby("model").size().median())
    header = [
        "model",
        "test queries",
        f"from {N_ONBOARD_EVALS} evals",
        f"from all ~{n_all:,}",
        "majority guess",
    ]
    demo.say(*_table(header, rows))
    demo.say(
        f"  (embedding the {_count(len(held_out), 'model')} took {onboard_time:.2f} s)",
        "",
    )
    return {"onboarding_accuracy": results}


# portfolio_curve's warning of a portfolio none of whose models has a test
# score (its accuracy is NaN).
_UNSCORED_PORTFOLIO = r"The portfolio of .* has accuracy NaN"


def _portfolio(demo, router, quick):
    """Step 4: portfolios chosen for expected routing accuracy and by k-medoids
    on the embeddings, against random ones; (summary, curves)."""
    from .. import ExpectedAccuracySelector, KMedoidsSelector
    from .._warnings import ignoring
    from ..inspection import portfolio_curve

    models, test = router.classes_, demo.test
    scored = _common(test, models)
    if scored["query"].nunique() < MIN_COMMON_QUERIES:
        scored = test[test["model"].isin(models)]
    k = min(PORTFOLIO_SIZE, len(models) - 1) if len(models) > 1 else 1
    sizes = list(range(1, min(len(models), 12) + 1))
    # The router's predictions on the training queries (no scores, no test
    # query): what the expected-accuracy selector reads.
    predicted = router.predict_proba(demo.train["query"].unique()).T
    # The random baseline is drawn once, with the first curve (the table and
    # the figure show it once).
    choices = {
        "expected": (ExpectedAccuracySelector(), predicted, 5 if quick else 20),
        "k-medoids": (KMedoidsSelector(), router.model_embeddings_, 0),
    }
    curves, at_k, unscored = {}, {}, []
    for name, (selector, X, n_random) in choices.items():
        # A portfolio of models without test scores (of evals that lack
        # them) has no accuracy: said once below, in the demo's terms,
        # rather than warned of per portfolio.
        with ignoring({"message": _UNSCORED_PORTFOLIO, "category": UserWarning}):
            curves[name] = portfolio_curve(
                router, scored, sizes, selector=selector, embeddings=X,
                n_random=n_random, random_state=demo.seed,
            )  # fmt: skip
        at_k[name] = curves[name].loc[curves[name]["value"] == k].iloc[0]
        empty = curves[name].loc[curves[name]["n_queries"] == 0, "value"]
        if len(empty):
            sizes_text = ", ".join(str(int(v)) for v in empty)
            unscored.append(f"size {sizes_text} ({name})")
    portfolio = list(at_k["expected"]["models"])
    row = at_k["expected"]
    demo.say(
        f"[4/4] Portfolios of {_count(k, 'model')} (pool of {len(models)}):",
        f"  for expected routing accuracy (the router's P(correct) on the "
        f"training queries): {', '.join(portfolio)}",
        *_table(
            ["routing among", "accuracy"],
            [
                (f"all {len(models)} models", f"{row['full_pool_accuracy']:.3f}"),
                (
                    f"the {_count(k, 'model')} chosen for expected routing accuracy",
                    f"{row['accuracy']:.3f}",
                ),
                (
                    f"the {_count(k, 'model')} chosen by k-medoids on the embeddings",
                    f"{at_k['k-medoids']['accuracy']:.3f}",
                ),
                (  # ASCII "+/-": the report goes to stdouts of any encoding
                    f"random {k}-model portfolios (mean +/- sd)",
                    f"{row['random_mean']:.3f} +/- {row['random_std']:.3f}",
                ),
            ],
        ),
        f"  (on {int(row['n_queries']):,} test queries)",
        *(
            [
                "  No test query has a score of the models of the portfolios of "
                f"{'; '.join(unscored)}: they have no accuracy (left out of the "
                "figure)."
            ]
            if unscored
            else []
        ),
        "",
    )
    summary = dict(
        portfolio=portfolio,
        portfolio_accuracy=float(row["accuracy"]),
        kmedoids_portfolio_accuracy=float(at_k["k-medoids"]["accuracy"]),
        random_portfolio_accuracy=float(row["random_mean"]),
    )
    return summary, curves


def _run(evals, output, open_weights, epochs, seed, quick, stream):
    """The demo's steps; see :func:`run_demo`."""
    say = _Printer(stream or sys.stdout)
    start = time.perf_counter()
    output = Path(output)
    if _pyplot() is not None:  # else no figures, and no folder for them
        _check_output(output)
    demo = _Demo(evals, open_weights, seed, say)
    settings = dict(QUICK_SETTINGS if quick else DEMO_SETTINGS)
    if epochs is not None:
        settings["max_epochs"] = epochs
    router, fit_time = _train(demo, settings)
    summary = {"fit_seconds": fit_time}
    summary.update(_compare_routers(demo, router))
    summary.update(_onboard(demo, router))
    found, curves = _portfolio(demo, router, quick)
    summary.update(found)
    written = _figures(
        router, demo.family, found["portfolio"], demo.held_out, curves, output, say
    )
    summary["figures"] = written
    summary["output"] = str(output)
    total = time.perf_counter() - start
    summary["seconds"] = total
    say(f"Done in {total:.0f} s.")
    if written:
        say(f"Figures ({', '.join(written)}) written to {os.fspath(output)}")
    else:
        say(f"No figures written (output folder would be {os.fspath(output)})")
    return summary


def run_demo(
    evals=None,
    *,
    output="locus_demo_output",
    open_weights=True,
    epochs=None,
    seed=0,
    quick=False,
    stream=None,
    threads=None,
):
    """Run the LOCUS demo end to end and print a summary.

    Parameters
    ----------
    evals : str or path-like, default=None
        A long-format evaluation file (csv, parquet or jsonl; see
        :func:`~locus_sklearn.datasets.load_evals`), whose queries are encoded
        with the bundled MiniLM encoder; repeated (model, query) rows are
        averaged into one. None uses the built-in MMLU-Pro subset with its
        precomputed encodings.
    output : str or path-like, default="locus_demo_output"
        Folder for the figures (created with its parents if needed; that it
        can be is checked before any work).
    open_weights : bool, default=True
        With the built-in data, keep only the 27 open-weights models (where
        routing has headroom); False uses all 32.
    epochs : int, default=None
        Maximum training epochs; None uses the demo's setting (early stopping
        usually ends sooner).
    seed : int, default=0
        Seeds the query split, the held-out models and training.
    quick : bool, default=False
        Tiny settings that finish in seconds (a smoke test; the accuracies are
        then meaningless).
    stream : file-like, default=None
        Where to print; defaults to ``sys.stdout``. Training progress (the
        epoch table) always goes to stderr.
    threads : int, default=None
        Torch threads during the demo; None uses one thread on a machine
        without CUDA (the network is small).

    Returns
    -------
    summary : dict
        The numbers printed: routing accuracies, onboarding and portfolio
        results, the output folder and the figures written.
    """
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    elif not torch.cuda.is_available():
        # The demo's network is small: one thread costs little on an idle
        # machine, and avoids OpenMP's spin-waiting, which makes a multi-threaded
        # run many times slower on a busy one.
        torch.set_num_threads(1)
    try:
        return _run(evals, output, open_weights, epochs, seed, quick, stream)
    finally:
        torch.set_num_threads(previous)
