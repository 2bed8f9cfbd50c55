"""Embedding geometry benchmark: does the LOCUS model space reflect behaviour?

Usage::

    python benchmarks/geometry.py [--data builtin|full] [--seed 0] [--quick] \
        [--out benchmarks/results]

On MMLU-Pro (all 32 models) a LOCUS router is fitted on a seeded 80/20 query
split (training queries only); everything below is measured on the test
queries (paper sections 3.4-3.5 and appendix E):

- correlation (Pearson / Spearman / Kendall) between embedding distance and
  correctness disagreement over all model pairs (paper table 3);
- adjusted Rand index of the dendrogram cut at the true number of families
  against the hand-written ``family`` table, plus a dendrogram figure;
- k-th nearest-neighbor correctness agreement (k = 1..5) vs a random model;
- count-constrained portfolio curves (k-center, k-medoids, budget greedy with
  unit costs) vs random portfolios, routing accuracy restricted to the
  portfolio, k = 1..10;
- parameter-budget curve (``n_params``; the proprietary models have no
  public size and are excluded from that experiment) for the budget greedy
  selector vs random budget-filling portfolios;
- fallback routing accuracy (k = 1..3) next to the no-outage accuracy;
- fingerprinting: a distance threshold calibrated from 128-evaluation probes.

LOCUS runs at the package defaults (``LocusEmbedder(encodings,
random_state=seed)``, the kernel readout included). Every geometry number is
also computed for a trivial baseline embedding, each model's 14-d
per-category accuracy vector from its training evaluations, and where a
distance is enough (correlation, families, neighbors, fallback) for the
library's score disagreement on the training queries
(:func:`locus_sklearn.inspection.score_disagreement`, ``metric="precomputed"``).

``--data builtin`` (default) uses ``locus_sklearn.datasets.load_mmlu_pro()``
(3,000 questions, precomputed MiniLM encodings). ``--data full`` uses the
12,032-question matrix in ``../shared/data/mmlu_pro_32models`` and encodes the
prompts once with MiniLM (cached under ``benchmarks/.cache``).

Writes ``<out>/geometry.md``, ``<out>/geometry.json`` and
``<out>/geometry_*.png``.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from _args import positive_int  # noqa: E402
from _provenance import cpu_model, torch_device  # noqa: E402
from scipy.cluster.hierarchy import fcluster  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from locus_sklearn import (  # noqa: E402
    BudgetGreedySelector,
    KCenterSelector,
    KMedoidsSelector,
    LocusEmbedder,
    LocusRouter,
)
from locus_sklearn._training import EARLY_STOPPING_THRESHOLD  # noqa: E402
from locus_sklearn.datasets import load_mmlu_pro  # noqa: E402
from locus_sklearn.inspection import (  # noqa: E402
    calibrate_fingerprint_threshold,
    distance_disagreement_correlation,
    fallback_routing_accuracy,
    model_linkage,
    neighbor_agreement,
    plot_model_dendrogram,
    plot_portfolio_curve,
    portfolio_curve,
    score_disagreement,
)

# LOCUS settings: the package defaults (what a user's embeddings are; the
# report of 2026-11-29 used the embedding-only predictor with routing.py's
# regularisation, query noise 0.15 and weight decay 0.1, 40 epochs at most).
LOCUS_PARAMS = {}
QUICK_LOCUS = dict(
    embedding_dim=32,
    n_latents=8,
    n_blocks=1,
    n_heads=2,
    hidden_dim=32,
    enc_size=(64, 256),
    dec_size=64,
    max_epochs=3,
    episodes_per_epoch=32,
    early_stopping="valid_loss",
    patience=2,
)
COUNT_KS = list(range(1, 11))
NEIGHBOR_KS = [1, 2, 3, 4, 5]
FALLBACK_KS = [1, 2, 3]
BUDGETS = [10, 20, 40, 60, 80, 100, 150, 200, 300, 400, 600, 800, 1200]
TEST_FRACTION = 0.2


# --------------------------------------------------------------------------
# data


def load(data):
    """evals (query = id or text), encodings, family, n_params, description."""
    builtin = load_mmlu_pro()
    if data == "builtin":
        return dict(
            evals=builtin["evals"],
            encodings=builtin["encodings"],
            family=dict(builtin["family"]),
            n_params=dict(builtin["n_params"]),
            description="locus_sklearn.datasets.load_mmlu_pro(): 3,000 MMLU-Pro "
            "questions x 32 models, precomputed all-MiniLM-L6-v2 encodings",
        )
    import _data

    bench = _data.load_mmlu_pro(open_only=False)  # encodes 12k prompts once (cached)
    return dict(
        evals=bench.evals,
        encodings=bench.encodings,
        family=dict(builtin["family"]),
        n_params=dict(builtin["n_params"]),
        description=bench.description + " (all-MiniLM-L6-v2 encodings)",
    )


def split_queries(evals, seed):
    queries = np.array(sorted(evals["query"].unique()), dtype=object)
    rng = np.random.RandomState(seed)
    test = set(rng.permutation(queries)[: int(round(TEST_FRACTION * len(queries)))])
    is_test = evals["query"].isin(test).to_numpy()
    return evals[~is_test].reset_index(drop=True), evals[is_test].reset_index(drop=True)


def complete_queries(evals, models):
    """Rows of the queries that every model of ``models`` has a score for."""
    sub = evals[evals["model"].isin(models)]
    n = sub.groupby("query")["model"].nunique()
    full = n.index[n == len(models)]
    return sub[sub["query"].isin(full)].reset_index(drop=True)


def category_profiles(train, names):
    """Trivial baseline embedding: per-category training accuracy, (n_models, 14)."""
    table = train.pivot_table(
        index="model", columns="task", values="score", aggfunc="mean"
    )
    return table.reindex(index=names).to_numpy(dtype=np.float64), list(table.columns)


# --------------------------------------------------------------------------
# experiments


def correlations(Z, names, test, metrics=("cosine", "euclidean")):
    out = {}
    for metric in metrics:
        r = distance_disagreement_correlation(Z, test, names=names, metric=metric)
        out[metric] = dict(
            pearson=r.pearson,
            spearman=r.spearman,
            kendall=r.kendall,
            n_pairs=r.n_pairs,
            min_common=int(r.pairs["n_common"].min()),
        )
    return out


def family_ari(Z, names, family, seed, method="average", metric="euclidean"):
    truth = np.array([family[m] for m in names])
    n_fam = len(set(truth))
    labels = fcluster(
        model_linkage(Z, method=method, metric=metric), t=n_fam, criterion="maxclust"
    )
    ari = adjusted_rand_score(truth, labels)
    rng = np.random.RandomState(seed)
    null = [adjusted_rand_score(truth, rng.permutation(labels)) for _ in range(1000)]
    return dict(
        ari=float(ari),
        n_families=n_fam,
        n_clusters=int(len(set(labels))),
        null_mean=float(np.mean(null)),
        null_std=float(np.std(null)),
        null_p=float((np.sum(np.array(null) >= ari) + 1) / (len(null) + 1)),
        clusters={
            str(c): [str(m) for m in names[labels == c]] for c in sorted(set(labels))
        },
    )


def records(df):
    df = df.copy()
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: list(v) if isinstance(v, tuple) else v)
    return json.loads(df.to_json(orient="records"))


def git_commit():
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "locus_sklearn"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + (
            " (locus_sklearn/ has uncommitted changes)" if dirty else ""
        )
    except Exception:  # noqa: BLE001
        return "unknown"


def machine(device=None):
    """The machine in words; ``device``: the one the LOCUS fit ran on (None:
    the one a fit at ``device=None`` picks)."""
    return (
        f"{cpu_model()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), LOCUS fitted on "
        f"{torch_device(device)}, Python "
        f"{platform.python_version()}"
    )


# --------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=("builtin", "full"), default="builtin")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny LOCUS fit and few random draws (smoke test)",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite geometry.md from an existing geometry.json",
    )
    args = parser.parse_args(argv)
    if args.render_only:
        return render_only(args)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    commit = git_commit()  # the code that runs, not what HEAD is at the end
    n_random = 5 if args.quick else 50
    seed = args.seed
    timings = {}

    data = load(args.data)
    evals, family, n_params = data["evals"], data["family"], data["n_params"]
    train, test = split_queries(evals, seed)
    models = np.array(sorted(evals["model"].unique()), dtype=object)
    test_full = complete_queries(test, models)
    print(
        f"{len(models)} models; {train['query'].nunique()} train / "
        f"{test['query'].nunique()} test queries ({test_full['query'].nunique()} "
        "scored for every model)",
        flush=True,
    )

    # --- LOCUS fit on the training queries
    params = dict(LOCUS_PARAMS)
    if args.quick:
        params.update(QUICK_LOCUS)
    t = time.perf_counter()
    router = LocusRouter(LocusEmbedder(data["encodings"], random_state=seed, **params))
    router.fit(train)
    timings["fit_s"] = time.perf_counter() - t
    locus = router.embedder_
    fit_device = str(next(locus.net_.module_.parameters()).device)
    history = locus.net_.history
    # The restored weights are early stopping's best: the last epoch that beat
    # the best before it by the relative threshold, which need not be the
    # epoch of the lowest loss.
    stopping = dict(locus.net_.callbacks_).get("early_stopping")
    restored = int(stopping.best_epoch_) if stopping else None
    fit_info = dict(
        n_epochs=int(locus.n_epochs_),
        best_epoch=int(np.argmin(history[:, "valid_loss"])) + 1,
        best_valid_loss=float(np.min(history[:, "valid_loss"])),
        restored_epoch=restored,
        restored_valid_loss=(
            float(history[restored - 1, "valid_loss"]) if restored else None
        ),
    )
    print(f"LOCUS fit: {timings['fit_s']:.0f}s, {fit_info}", flush=True)
    names = np.asarray(router.classes_, dtype=object)
    assert (names == models).all()
    Z = np.asarray(router.model_embeddings_, dtype=np.float64)
    P, tasks = category_profiles(train, names)
    # The answers themselves: how often two models' training scores differ
    # on the training queries both answered (a distance, not an embedding).
    S = score_disagreement(train).distance.loc[names, names].to_numpy()
    SCORES = "score disagreement (train)"
    embeddings = {
        "LOCUS": (Z, ("cosine", "euclidean")),
        "category accuracy (14-d)": (P, ("cosine", "euclidean")),
        SCORES: (S, ("precomputed",)),
    }

    t = time.perf_counter()
    results = {"locus_routing_accuracy_test": float(router.score(test_full))}
    # Single best on train, oracle on the complete test queries.
    train_acc = train.groupby("model")["score"].mean()
    best = train_acc.idxmax()
    Yt = test_full.pivot(index="query", columns="model", values="score")
    results["single_best"] = dict(model=str(best), test_accuracy=float(Yt[best].mean()))
    results["oracle_test_accuracy"] = float(Yt.max(axis=1).mean())
    results["model_test_accuracy"] = {str(k): float(v) for k, v in Yt.mean().items()}
    routed = pd.Series(
        router.predict(sorted(test_full["query"].unique()))
    ).value_counts()
    results["routed_models_test"] = {str(k): int(v) for k, v in routed.items()}

    # --- 1. distance vs disagreement, 2. families, 3. neighbors
    geometry = {}
    for label, (E, metrics) in embeddings.items():
        geometry[label] = dict(
            correlation=correlations(E, names, test, metrics),
            ari={
                f"{mt}/average": family_ari(E, names, family, seed, metric=mt)
                for mt in reversed(metrics)
            },
            neighbors=records(
                neighbor_agreement(
                    E, test, k=NEIGHBOR_KS, names=names, metric=metrics[0]
                )
            ),
        )
    results["geometry"] = geometry
    tagged = [f"{m} [{family[m]}]" for m in names]
    fig = plot_model_dendrogram(Z, names=tagged, metric="euclidean")
    fig.suptitle("LOCUS embeddings (euclidean, average linkage)")
    fig.savefig(os.path.join(args.out, "geometry_dendrogram.png"), dpi=110)
    plt.close(fig)
    fig = plot_model_dendrogram(P, names=tagged, metric="euclidean")
    fig.suptitle("Baseline: per-category training accuracy (14-d)")
    fig.savefig(os.path.join(args.out, "geometry_dendrogram_baseline.png"), dpi=110)
    plt.close(fig)
    fig = plot_model_dendrogram(
        pd.DataFrame(S, index=tagged, columns=tagged), metric="precomputed"
    )
    fig.suptitle("Score disagreement on the training queries (average linkage)")
    fig.savefig(os.path.join(args.out, "geometry_dendrogram_scores.png"), dpi=110)
    plt.close(fig)
    timings["geometry_s"] = time.perf_counter() - t
    print("geometry done", flush=True)

    # --- 4. count portfolios (all 32 models, complete test queries)
    t = time.perf_counter()
    unit = np.ones(len(names))
    selectors = {
        "k-center": KCenterSelector(),
        "k-medoids": KMedoidsSelector(),
        "budget greedy (unit costs)": BudgetGreedySelector(),
    }
    count = {}
    for label, sel in selectors.items():
        kwargs = dict(costs=unit) if isinstance(sel, BudgetGreedySelector) else {}
        count[label] = portfolio_curve(
            router,
            test_full,
            COUNT_KS,
            selector=sel,
            n_random=n_random,
            random_state=seed,
            **kwargs,
        )
    count["k-medoids on baseline embedding"] = portfolio_curve(
        router,
        test_full,
        COUNT_KS,
        selector=KMedoidsSelector(),
        embeddings=P,
        n_random=n_random,
        random_state=seed,
    )
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for i, (label, curve) in enumerate(count.items()):
        plot_portfolio_curve(curve, ax=ax, label=label, random=i == 0, full_pool=i == 0)
    ax.set_title("Count-constrained portfolios (32 models, test queries)")
    fig.savefig(os.path.join(args.out, "geometry_portfolio_count.png"), dpi=110)
    plt.close(fig)
    results["count_portfolio"] = {k: records(v) for k, v in count.items()}
    timings["count_portfolio_s"] = time.perf_counter() - t
    print("count portfolios done", flush=True)

    # --- 5. parameter-budget portfolios (open-weights models only)
    t = time.perf_counter()
    closed = [m for m in names if not np.isfinite(n_params.get(m, np.nan))]
    open_router = copy.deepcopy(router).remove_models(closed)
    open_names = np.asarray(open_router.classes_, dtype=object)
    costs = np.array([n_params[m] for m in open_names], dtype=np.float64)
    test_open = complete_queries(test, open_names)
    budgets = [b for b in BUDGETS if b >= costs.min()]
    P_open = P[np.isin(names, open_names)]
    budget = {
        "budget greedy": portfolio_curve(
            open_router,
            test_open,
            budgets,
            selector=BudgetGreedySelector(),
            costs=costs,
            n_random=n_random,
            random_state=seed,
        ),
        "budget greedy on baseline embedding": portfolio_curve(
            open_router,
            test_open,
            budgets,
            selector=BudgetGreedySelector(),
            costs=costs,
            embeddings=P_open,
            n_random=n_random,
            random_state=seed,
        ),
    }
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for i, (label, curve) in enumerate(budget.items()):
        plot_portfolio_curve(curve, ax=ax, label=label, random=i == 0, full_pool=i == 0)
    ax.set_xscale("log")
    ax.set_xlabel("parameter budget (billions)")
    ax.set_title(f"Parameter-budget portfolios ({len(open_names)} open-weights models)")
    fig.savefig(os.path.join(args.out, "geometry_portfolio_budget.png"), dpi=110)
    plt.close(fig)
    results["budget_portfolio"] = dict(
        excluded_models=[str(m) for m in closed],
        total_params_b=float(costs.sum()),
        n_test_queries=int(test_open["query"].nunique()),
        curves={k: records(v) for k, v in budget.items()},
    )
    timings["budget_portfolio_s"] = time.perf_counter() - t
    print("budget portfolios done", flush=True)

    # --- 6. fallback routing
    t = time.perf_counter()
    results["fallback"] = {
        "LOCUS": records(fallback_routing_accuracy(router, test_full, k=FALLBACK_KS)),
        "category accuracy (14-d)": records(
            fallback_routing_accuracy(router, test_full, k=FALLBACK_KS, embeddings=P)
        ),
        SCORES: records(
            fallback_routing_accuracy(
                router, test_full, k=FALLBACK_KS, embeddings=S, metric="precomputed"
            )
        ),
    }
    timings["fallback_s"] = time.perf_counter() - t

    # --- 7. fingerprinting (probes of 128 training evaluations)
    t = time.perf_counter()
    fp = calibrate_fingerprint_threshold(
        router,
        train,
        n_resamples=5,
        n_evals=128,
        false_match_rate=0.01,
        random_state=seed,
    )
    results["fingerprint"] = dict(
        n_evals=128,
        n_resamples=5,
        target_false_match_rate=0.01,
        metric="cosine",
        threshold=fp.threshold,
        false_match_rate=fp.false_match_rate,
        true_match_rate=fp.true_match_rate,
        n_models=len(fp.models),
        n_self_pairs=len(fp.self_distances),
        n_cross_pairs=len(fp.cross_distances),
        self_distance_median=float(np.median(fp.self_distances)),
        self_distance_p95=float(np.quantile(fp.self_distances, 0.95)),
        cross_distance_median=float(np.median(fp.cross_distances)),
        cross_distance_p01=float(np.quantile(fp.cross_distances, 0.01)),
    )
    timings["fingerprint_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - t_start

    meta = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        commit=commit,
        machine=machine(fit_device),
        data=args.data,
        description=data["description"],
        seed=seed,
        quick=args.quick,
        n_models=len(names),
        n_train_queries=int(train["query"].nunique()),
        n_test_queries=int(test["query"].nunique()),
        n_test_queries_complete=int(test_full["query"].nunique()),
        n_train_evals=len(train),
        n_families=len(set(family[m] for m in names)),
        locus_params={
            k: (list(v) if isinstance(v, tuple) else v) for k, v in params.items()
        },
        fit=fit_info,
        n_random=n_random,
        tasks=tasks,
        timings=timings,
    )
    report = dict(meta=meta, results=results)
    with open(os.path.join(args.out, "geometry.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, default=float)
    with open(os.path.join(args.out, "geometry.md"), "w", encoding="utf-8") as f:
        f.write(markdown(report))
    print(f"wrote {args.out}/geometry.md ({timings['total_s']:.0f}s)")
    return report


def render_only(args):
    """Rebuild the markdown from geometry.json (adds data-only fields if absent)."""
    path = os.path.join(args.out, "geometry.json")
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    r, m = report["results"], report["meta"]
    if "model_test_accuracy" not in r:
        evals = load(m["data"])["evals"]
        _, test = split_queries(evals, m["seed"])
        test_full = complete_queries(test, sorted(evals["model"].unique()))
        Yt = test_full.pivot(index="query", columns="model", values="score")
        r["model_test_accuracy"] = {str(k): float(v) for k, v in Yt.mean().items()}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=float)
    with open(os.path.join(args.out, "geometry.md"), "w", encoding="utf-8") as f:
        f.write(markdown(report))
    return report


def single_model_points(r):
    """Portfolio points whose accuracy equals one member's own test accuracy.

    When (nearly) all do, the router sends every query of a portfolio to one
    model: the portfolio curves then measure whether the selection contains
    the model the router ranks first, not routing among complementary models.
    """
    acc = r["model_test_accuracy"]
    points = [row for cv in r["count_portfolio"].values() for row in cv]
    points += [row for cv in r["budget_portfolio"]["curves"].values() for row in cv]
    hits = sum(
        any(abs(acc[mm] - row["accuracy"]) < 1e-9 for mm in row["models"])
        for row in points
    )
    return hits, len(points)


# --------------------------------------------------------------------------
# report


def _t(rows, header):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def f3(x):
    return "nan" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.3f}"


def markdown(report):
    m, r = report["meta"], report["results"]
    g = r["geometry"]
    labels = list(g)
    out = [f"# Embedding geometry benchmark (MMLU-Pro, {m['n_models']} models)\n"]
    out.append(
        f"- date: {m['date']}; commit: `{m['commit']}`; seed {m['seed']}"
        f"{'; **--quick**' if m['quick'] else ''}\n- machine: {m['machine']}\n"
        f"- data: {m['description']}; seeded 80/20 query split: "
        f"{m['n_train_queries']} train / {m['n_test_queries']} test queries "
        f"({m['n_test_queries_complete']} test queries scored for all "
        f"{m['n_models']} models; used for routing, portfolio and fallback numbers; "
        "correlations and neighbor agreement use every test query, pairwise)\n"
        f"- LOCUS: `LocusRouter(LocusEmbedder(encodings, random_state={m['seed']}"
        + "".join(f", {k}={v!r}" for k, v in m["locus_params"].items())
        + f"))` fitted on the {m['n_train_evals']} training evaluations; trained "
        f"{m['fit']['n_epochs']} epochs, lowest valid loss "
        f"{m['fit']['best_valid_loss']:.4f} at epoch {m['fit']['best_epoch']}"
        + (
            f", weights of epoch {m['fit']['restored_epoch']} restored (valid loss "
            f"{m['fit']['restored_valid_loss']:.4f}: early stopping's best, which "
            f"later epochs must beat by a relative {EARLY_STOPPING_THRESHOLD:g})"
            if m["fit"].get("restored_epoch")
            else ""
        )
        + "\n"
        "- baseline embedding: each model's per-category accuracy on its training "
        f"evaluations ({len(m['tasks'])}-d); score disagreement (train): "
        "`score_disagreement(train).distance`, the share of the training queries "
        "both models answered on which their scores differ (a distance: sections "
        "1-3 and 6)\n"
        f"- random baselines: {m['n_random']} draws; wall time "
        f"{m['timings']['total_s']:.0f} s (LOCUS fit {m['timings']['fit_s']:.0f} s)\n"
        f"- context: LOCUS routing accuracy on the complete test queries "
        f"{f3(r['locus_routing_accuracy_test'])}; single best (on train: "
        f"{r['single_best']['model']}) {f3(r['single_best']['test_accuracy'])}; "
        f"oracle {f3(r['oracle_test_accuracy'])}\n"
    )
    acc = r.get("model_test_accuracy")
    if acc:
        ranked = sorted(acc.items(), key=lambda kv: -kv[1])
        out.append(
            "- per-model accuracy on the complete test queries: "
            + ", ".join(f"{k} {v:.3f}" for k, v in ranked)
            + "\n"
        )
        hits, total = single_model_points(r)
        routed = r.get("routed_models_test")
        out.append(
            "- **router diversity**: "
            + (
                f"LOCUS routes the complete test queries to {len(routed)} distinct "
                f"model(s) ({', '.join(f'{k}: {v}' for k, v in routed.items())}); "
                if routed
                else ""
            )
            + f"{hits} of {total} portfolio points (sections 4-5) have exactly the "
            "test accuracy of one of their own members, i.e. the router sends every "
            "query of the portfolio to a single model. Where that holds, the "
            "portfolio and fallback numbers measure whether the selection (or "
            "neighbor) holds the model the router ranks first, not complementary "
            "routing.\n"
        )
    out.append(
        "\n## 1. Embedding distance vs correctness disagreement (paper table 3)\n\n"
    )
    columns = [(lab, mt) for lab in labels for mt in g[lab]["correlation"]]
    rows = []
    for stat in ("pearson", "spearman", "kendall"):
        row = [stat.capitalize()]
        row += [f3(g[lab]["correlation"][mt][stat]) for lab, mt in columns]
        rows.append(row)
    rows.append(
        ["paper (112 models)", "0.845 / 0.886 / 0.714", "0.887 / 0.876 / 0.702"]
        + [""] * (len(columns) - 2)
    )
    header = ["correlation"] + [f"{lab}, {mt}" for lab, mt in columns]
    out.append(_t(rows, header))
    c = g["LOCUS"]["correlation"]["cosine"]
    out.append(
        f"\n{c['n_pairs']} model pairs; every pair shares at least "
        f"{c['min_common']} test queries."
    )
    best = {
        stat: max(columns, key=lambda lm: g[lm[0]]["correlation"][lm[1]][stat])
        for stat in ("pearson", "spearman", "kendall")
    }
    out.append(
        " Highest: "
        + "; ".join(f"{s} {lab} ({mt})" for s, (lab, mt) in best.items())
        + ".\n"
    )

    out.append(
        f"\n## 2. Families: ARI of the dendrogram cut at {m['n_families']} clusters\n\n"
    )
    rows = []
    for lab in labels:
        for key, a in g[lab]["ari"].items():
            rows.append(
                [
                    lab,
                    key,
                    f3(a["ari"]),
                    f"{a['null_mean']:.3f} ± {a['null_std']:.3f}",
                    f"{a['null_p']:.3f}",
                ]
            )
    out.append(
        _t(
            rows,
            [
                "embedding",
                "distance/linkage",
                "ARI",
                "ARI of permuted cut (mean ± std)",
                "p (permutation)",
            ],
        )
    )
    out.append("\nClusters of the LOCUS cut (euclidean, average linkage):\n\n")
    for cl, ms in g["LOCUS"]["ari"]["euclidean/average"]["clusters"].items():
        out.append(f"- {cl}: {', '.join(ms)}\n")
    scores = g.get("score disagreement (train)")
    if scores:
        out.append("\nClusters of the score-disagreement cut (average linkage):\n\n")
        for cl, ms in scores["ari"]["precomputed/average"]["clusters"].items():
            out.append(f"- {cl}: {', '.join(ms)}\n")
    out.append(
        "\nFigures: `geometry_dendrogram.png` (LOCUS), "
        "`geometry_dendrogram_baseline.png` (baseline), "
        "`geometry_dendrogram_scores.png` (score disagreement).\n"
    )

    out.append(
        "\n## 3. Nearest-neighbor correctness agreement (cosine; the score "
        "disagreement as its own distance)\n\n"
    )
    rows = []
    for i, k in enumerate(NEIGHBOR_KS):
        row = [k] + [f3(g[lab]["neighbors"][i]["agreement"]) for lab in labels]
        rows.append(row + [f3(g["LOCUS"]["neighbors"][i]["random_agreement"])])
    out.append(
        _t(
            rows,
            ["k"]
            + [f"k-th neighbor, {lab}" for lab in labels]
            + ["random other model"],
        )
    )

    out.append(
        "\n## 4. Count-constrained portfolios (routing accuracy on test queries)\n\n"
    )
    curves = r["count_portfolio"]
    first = next(iter(curves.values()))
    rows = []
    for i, k in enumerate(COUNT_KS):
        row = [k] + [f3(cv[i]["accuracy"]) for cv in curves.values()]
        row.append(f"{first[i]['random_mean']:.3f} ± {first[i]['random_std']:.3f}")
        rows.append(row)
    out.append(_t(rows, ["k"] + list(curves) + ["random (mean ± std)"]))
    out.append(
        f"\nFull pool (LOCUS routing over all {m['n_models']} models): "
        f"{f3(first[0]['full_pool_accuracy'])}. Portfolios at k = 5: \n\n"
    )
    for lab, cv in curves.items():
        out.append(f"- {lab}: {', '.join(cv[4]['models'])}\n")
    out.append("\nFigure: `geometry_portfolio_count.png`.\n")

    b = r["budget_portfolio"]
    out.append("\n## 5. Parameter-budget portfolios (open-weights models only)\n\n")
    out.append(
        f"Excluded (no public parameter count): {', '.join(b['excluded_models'])}. "
        f"{len(m['tasks']) and ''}Pool: {m['n_models'] - len(b['excluded_models'])} "
        f"models, {b['total_params_b']:.0f}B parameters in total; "
        f"{b['n_test_queries']} test queries scored for all of them.\n\n"
    )
    bc = b["curves"]
    g0 = next(iter(bc.values()))
    rows = []
    for i, row0 in enumerate(g0):
        row = [f"{row0['value']:g}"]
        for cv in bc.values():
            row.append(
                f"{f3(cv[i]['accuracy'])} ({cv[i]['n_models']} m, {cv[i]['cost']:.0f}B)"
            )
        row.append(f"{row0['random_mean']:.3f} ± {row0['random_std']:.3f}")
        rows.append(row)
    out.append(_t(rows, ["budget (B)"] + list(bc) + ["random feasible (mean ± std)"]))
    out.append(
        f"\nFull open pool: {f3(g0[0]['full_pool_accuracy'])}. "
        "Figure: `geometry_portfolio_budget.png`.\n"
    )

    out.append(
        "\n## 6. Fallback routing (routed model down → its k-th neighbor: cosine "
        "for embeddings, the score disagreement as its own distance)\n\n"
    )
    fb = r["fallback"]
    rows = []
    for i, k in enumerate(FALLBACK_KS):
        row = [k]
        for cv in fb.values():
            row += [f3(cv[i]["accuracy"]), f3(cv[i]["retained"])]
        rows.append(row + [f3(fb["LOCUS"][i]["no_outage_accuracy"])])
    header = ["k"]
    for lab in fb:
        header += [f"accuracy ({lab} neighbors)", "retained"]
    out.append(_t(rows, header + ["no-outage accuracy"]))

    fp = r["fingerprint"]
    out.append("\n## 7. Fingerprinting (probes of 128 evaluations, cosine)\n\n")
    out.append(
        _t(
            [
                [
                    f"{fp['threshold']:.4g}",
                    f3(fp["false_match_rate"]),
                    f3(fp["true_match_rate"]),
                    f"{fp['self_distance_median']:.4g}",
                    f"{fp['self_distance_p95']:.4g}",
                    f"{fp['cross_distance_p01']:.4g}",
                    f"{fp['cross_distance_median']:.4g}",
                ]
            ],
            [
                "threshold",
                "false-match rate",
                "true-match rate",
                "self dist. median",
                "self dist. p95",
                "cross dist. p1",
                "cross dist. median",
            ],
        )
    )
    out.append(
        f"\n{fp['n_models']} models x {fp['n_resamples']} random 128-evaluation "
        f"subsets of their training evaluations; threshold set for a "
        f"{fp['target_false_match_rate']:.0%} false-match rate over "
        f"{fp['n_cross_pairs']} cross-model pairs; true-match rate over "
        f"{fp['n_self_pairs']} same-model pairs.\n"
    )
    out.append("\n## Timings (s)\n\n")
    out.append(
        _t([[k, f"{v:.1f}"] for k, v in m["timings"].items()], ["step", "seconds"])
    )
    return "".join(out)


if __name__ == "__main__":
    main()
