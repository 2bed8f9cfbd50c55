"""Side-by-side routing benchmark: LOCUS and every peer router, same splits.

Usage::

    python benchmarks/routing.py --data mmlu-open routerbench [--quick] \
        [--seeds 0 1 2] [--n 64 128 256 512 1024 all] [--encoder DIR] \
        [--evals PATH] [--out benchmarks/results] [--jobs N] [--rebuild]

Data: ``mmlu-open`` and ``mmlu-all`` (MMLU-Pro, 12,032 questions x 27
open-weights / all 32 models), ``routerbench``, ``bfcl`` and ``shaberi`` (all
read from ``../shared/data``, on development machines only), ``synthetic``
(runs anywhere), or ``evals`` with ``--evals PATH``.

Seeds run in parallel processes, one per core (``--jobs``), each fit on one
thread (``--threads``). ``--rebuild`` re-summarises the stored JSON and rewrites
the README without running anything.

For each data set and seed: a query split (the data's own train/test split
where it has one, else a seeded 80/20 split of the queries); for each n, every
model gets a fresh random subset of n of its training-split evaluations
(models see different queries), and LOCUS and every peer are fitted on exactly
those rows, with the same precomputed query encodings (a mapping encoder).
Scores are computed on the test queries that every pool model has a score for.

Experiments: ``main`` (routing / correctness accuracy, log-loss, oracle,
single best chosen on train, fit / embedding / routing times), ``onboarding``
(hold out a quarter of the models, embed them from k evaluations with
``add_models``), ``robustness`` (re-embed from overlapping / subsampled
evaluation sets; embedding drift), ``cost`` (cost-quality curves where per-query
costs are known). Writes ``<out>/<dataset>_<date>[_<tag>].json`` and
regenerates ``<out>/README.md`` from the JSON in ``<out>``: per data set the
latest untagged run of every router, n and experiment (``readme_exclusion``);
tagged and partial runs stay in their JSON files.
"""

# ruff: noqa: E501  (markdown tables and log lines are long by nature)

import argparse
import copy
import datetime
import glob
import json
import os
import platform
import sys
import time

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.frozen import FrozenEstimator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import _data  # noqa: E402
from _args import (  # noqa: E402
    locus_setting,
    n_or_all,
    non_negative_int,
    positive_int,
)
from _provenance import cpu_model, git_commit, git_dirty, torch_device  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.baselines import (  # noqa: E402
    IRTRouter,
    KMeansRouter,
    KNNRouter,
    MatrixFactorizationRouter,
    SingleBestRouter,
)
from locus_sklearn.metrics import (  # noqa: E402
    correctness_accuracy,
    correctness_log_loss,
    oracle_accuracy,
    routing_accuracy,
)

ALL_DATA = ("mmlu-open", "mmlu-all", "routerbench", "bfcl", "shaberi", "synthetic")
FULL_NS = (64, 128, 256, 512, 1024, "all")
QUICK_NS = (256, "all")
ONBOARD_KS = (16, 32, 64, 128, 256, 1024)
OVERLAPS = (0.0, 0.25, 0.5, 0.75, 1.0)
ROBUST_NS = (64, 128, 256, 512, 1024)

# --------------------------------------------------------------------------
# LOCUS settings: the one place they are set. The package defaults (the
# paper's d=128, r=64, L=2, 4 heads, predictor hidden 64, enc sizes 64..1024,
# disjoint S_enc/S_dec, dropout 0.1, query noise 0.05, weight decay 0.01,
# early stopping on valid_loss, patience 7, plus the kernel readout), with
# max_epochs capped at 40 for CPU time. How they were chosen
# (benchmarks/results/TUNING.md): the kernel readout in session 2, on this
# script's own test queries of mmlu-open (seeds 0-2 at n=256, seed 0 at
# n=all), so a selection on test data; those seeds' mmlu-open figures are not
# clean of it. Checked afterwards on seeds 3 and 4, never used for choosing
# (session 3, n=256: the default 0.628 / 0.656 against the embedding-only
# predictor's 0.623 / 0.639; kNN 0.642 / 0.661). The same test queries showed
# heavier regularisation or a shorter step budget level at n=256 but
# collapsing to routing every query to one model at n=all, and monitoring
# valid_routing_accuracy too noisy at n=256 (about 160 held-out queries with
# >= 2 models). Re-judged on held-out training queries with
# benchmarks/tune_locus.py, which reads no test query (TUNING.md, session 50:
# n=256, seeds 0-2, the kernel readout 0.649 against the embedding-only
# predictor's 0.632, above it on every seed; kNN 0.659).
LOCUS_PARAMS = dict(
    embedding_dim=128,
    n_latents=64,
    n_blocks=2,
    n_heads=4,
    hidden_dim=64,
    dropout=0.1,
    query_noise=0.05,
    weight_decay=0.01,
    enc_size=(64, 1024),
    dec_size=256,
    disjoint=True,
    lr=1e-3,
    max_epochs=40,
    episodes_per_epoch=256,
    batch_size=16,
    validation_fraction=0.1,
    early_stopping="valid_loss",
    patience=7,
    kernel_readout=True,
)
TINY_LOCUS = dict(
    embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2, hidden_dim=16,
    enc_size=(8, 64), dec_size=32, max_epochs=2, episodes_per_epoch=16,
)  # fmt: skip
# Peer settings (package defaults unless noted).
PEER_PARAMS = {
    "kNN": dict(k=50),  # k=50 as measured in DESIGN.md
    "KMeans": dict(n_clusters=20),
    "MF": dict(),
    "IRT": dict(),
    "SingleBest": dict(),
}
TINY_PEERS = {
    "MF": dict(max_epochs=2),
    "IRT": dict(max_epochs=2),
    "KMeans": dict(n_clusters=5),
}
ROUTERS = ("LOCUS", "kNN", "KMeans", "MF", "IRT", "SingleBest")
EXPERIMENTS = ("main", "onboarding", "robustness", "cost")


def make_router(name, encodings, seed, settings):
    if name == "LOCUS":
        embedder = LocusEmbedder(encodings, random_state=seed, **settings["locus"])
        return LocusRouter(embedder)
    params = dict(settings["peers"].get(name, {}))
    if name == "kNN":
        return KNNRouter(encoder=encodings, **params)
    if name == "KMeans":
        return KMeansRouter(encoder=encodings, random_state=seed, **params)
    if name == "MF":
        return MatrixFactorizationRouter(encoder=encodings, random_state=seed, **params)
    if name == "IRT":
        return IRTRouter(encoder=encodings, random_state=seed, **params)
    if name == "SingleBest":
        return SingleBestRouter(**params)
    raise ValueError(name)


# ------------------------------------------------------------------ helpers
def machine_info(device=None):
    """The machine, ``device`` being the LOCUS settings' ``device``."""
    import torch

    return {
        "cpu": cpu_model(),
        "device": torch_device(device),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


class Split:
    """One seed's query split and the per-model pools of training rows."""

    def __init__(self, data, seed):
        evals = data.evals
        queries = pd.unique(evals["query"])
        if data.split is not None:
            is_train_q = np.array([data.split[q] == "train" for q in queries])
        else:
            rng = np.random.default_rng([seed, 17])
            is_train_q = np.zeros(len(queries), dtype=bool)
            is_train_q[
                rng.permutation(len(queries))[: int(round(0.8 * len(queries)))]
            ] = True
        train_q = set(queries[is_train_q])
        self.models = np.array(sorted(evals["model"].unique()), dtype=object)
        in_train = evals["query"].isin(train_q).to_numpy()
        self.train_rows = evals[in_train].reset_index(drop=True)
        test = evals[~in_train]
        dense = test.pivot_table(
            index="query", columns="model", values="score", aggfunc="mean"
        )
        dense = dense.reindex(columns=self.models)
        dense = dense[dense.notna().all(axis=1)]
        self.test_queries = dense.index.to_numpy().astype(object)
        self.y_test = dense.to_numpy(dtype=np.float64)
        self.model_rows = {
            m: idx.to_numpy()
            for m, idx in self.train_rows.groupby("model").groups.items()
        }
        self.seed = seed

    def training_rows(self, n):
        """The n training rows per model (all when n == 'all') that every
        benchmark trains on for this split: one key per n, so scripts that
        compare methods or diagnose a run read the same rows."""
        return self.sample(n, key=n_key(n) % 10**6)

    def sample(self, n, key, models=None):
        """n random training-split rows per model (all when n == 'all')."""
        rng = np.random.default_rng([self.seed, 1000 + key])
        parts = []
        for m in self.models if models is None else models:
            rows = self.model_rows[m]
            if n != "all" and len(rows) > n:
                rows = rng.choice(rows, n, replace=False)
            parts.append(np.sort(rows))
        return self.train_rows.iloc[np.concatenate(parts)].reset_index(drop=True)


def n_key(n):
    return 10**9 if n == "all" else int(n)


def score_block(y_true, proba):
    return {
        "routing_acc": routing_accuracy(y_true, proba),
        "correctness_acc": correctness_accuracy(y_true, proba),
        "log_loss": correctness_log_loss(y_true, np.clip(proba, 0, 1)),
    }


def cost_curve(y_true, proba, costs_model, costs_query, n_points=41):
    """Accuracy vs mean realised cost when routing argmax p - lam * c."""
    scale = float(np.max(costs_model))
    lams = np.concatenate([[0.0], np.geomspace(1e-4, 1e3, n_points - 1) / scale])
    rows = np.arange(len(y_true))
    points = []
    for lam in lams:
        routed = np.argmax(proba - lam * costs_model[None, :], axis=1)
        points.append(
            {
                "cost_weight": float(lam),
                "accuracy": float(y_true[rows, routed].mean()),
                "cost": float(np.nanmean(costs_query[rows, routed])),
            }
        )
    return points


def cheapest_matching(points, target):
    ok = [p["cost"] for p in points if p["accuracy"] >= target - 1e-12]
    return min(ok) if ok else None


# --------------------------------------------------------------- experiments
def run_main(data, split, n, settings, routers, log):
    """Fit every router on the same rows; score on the complete test queries."""
    train = split.training_rows(n)
    y = split.y_test
    out, fitted = {}, {}
    per_model = train.groupby("model")["score"]
    sb_index = int(np.argmax(per_model.mean().reindex(split.models).to_numpy()))
    base = {
        "oracle_acc": oracle_accuracy(y),
        "single_best_acc": float(y[:, sb_index].mean()),
        "single_best_model": str(split.models[sb_index]),
        "train_rows": len(train),
        "evals_per_model_median": float(per_model.size().median()),
        "n_test_queries": len(y),
    }
    for name in routers:
        router = make_router(name, data.encodings, split.seed, settings)
        t0 = time.perf_counter()
        router.fit(train)
        fit_s = time.perf_counter() - t0
        assert list(router.classes_) == list(split.models)
        t0 = time.perf_counter()
        proba = router.predict_proba(split.test_queries)
        latency = (time.perf_counter() - t0) / len(y) * 1000
        res = score_block(y, proba)
        routed = np.argmax(proba, axis=1)
        res.update(
            fit_s=fit_s,
            latency_ms_per_query=latency,
            distinct_routed=int(len(np.unique(routed))),
            top_routed_share=float(np.bincount(routed).max() / len(routed)),
        )
        if name == "LOCUS":
            t0 = time.perf_counter()
            router.embed(train)
            res["embed_s"] = time.perf_counter() - t0
            res["n_epochs"] = int(router.embedder_.n_epochs_)
            # The default's safeguard: the blend toward the mean score chosen at fit.
            res["shrinkage"] = float(router.shrinkage_)
        out[name] = res
        fitted[name] = (router, proba)
        log(
            f"    {name:10s} n={n!s:>4} route={res['routing_acc']:.4f} "
            f"corr={res['correctness_acc']:.4f} ll={res['log_loss']:.4f} "
            f"fit={fit_s:.1f}s distinct={res['distinct_routed']}"
            + (f" shrinkage={res['shrinkage']:g}" if "shrinkage" in res else "")
        )
    return base, out, fitted, train


def _plain_locus(router, train):
    """The plain router (``shrinkage=None``) on ``router``'s trained embedder."""
    return LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None).fit(train)


def run_onboarding(data, split, train, settings, trained_in, ks, log):
    """Hold out a quarter of the models; embed them from k evaluations each."""
    rng = np.random.default_rng([split.seed, 99])
    n_out = max(1, int(round(len(split.models) / 4)))
    held = np.sort(rng.choice(split.models, n_out, replace=False))
    base_models = np.array(
        [m for m in split.models if m not in set(held)], dtype=object
    )
    cols = np.searchsorted(split.models, held)
    y = split.y_test
    base_train = train[train["model"].isin(set(base_models))]  # the main run's rows
    t0 = time.perf_counter()
    base = make_router("LOCUS", data.encodings, split.seed, settings).fit(base_train)
    fit_s = time.perf_counter() - t0
    locus_in, knn_in = trained_in.get("LOCUS"), trained_in.get("kNN")
    # The new models' correctness is read from the plain P(correct) of the same
    # trained embedders (shrinkage=None, no retraining): the default's
    # shrinkage is a routing safeguard that blends every prediction toward the
    # model's mean score (at s = 1 that mean for every query), not a per-query
    # estimate. Routing accuracy is the default router's.
    plain_base = _plain_locus(base, base_train)
    trained_in = dict(trained_in)
    if locus_in is not None:
        trained_in["LOCUS"] = (
            None,
            _plain_locus(locus_in[0], train).predict_proba(split.test_queries),
        )
    res = {
        "held_out": held.tolist(),
        "base_fit_s": fit_s,
        "base_shrinkage": float(base.shrinkage_),
        "trained_in": {
            name: {
                "correctness_acc": correctness_accuracy(y[:, cols], proba[:, cols]),
                "routing_acc": routing_accuracy(y, proba),
            }
            for name, (_, proba) in trained_in.items()
            if name in ("LOCUS", "kNN", "SingleBest", "KMeans", "MF", "IRT")
        },
        "by_k": {},
    }
    for k in ks:
        new = split.sample(k, key=5000 + k, models=held)
        router, plain = copy.deepcopy(base), copy.deepcopy(plain_base)
        t0 = time.perf_counter()
        router.add_models(new)
        add_s = time.perf_counter() - t0
        plain.add_models(new)
        proba = router.predict_proba(split.test_queries)
        p_plain = plain.predict_proba(split.test_queries)
        assert list(router.classes_) == list(split.models)
        row = {
            "LOCUS": {
                "correctness_acc": correctness_accuracy(y[:, cols], p_plain[:, cols]),
                "log_loss": correctness_log_loss(y[:, cols], p_plain[:, cols]),
                "routing_acc": routing_accuracy(y, proba),
                "add_s": add_s,
                "evals_per_new_model": int(new.groupby("model").size().median()),
            }
        }
        if knn_in is not None:  # memory-based: onboarding = re-indexing, no training
            knn = make_router("kNN", data.encodings, split.seed, settings)
            knn.fit(pd.concat([base_train, new], ignore_index=True))
            p = knn.predict_proba(split.test_queries)
            row["kNN"] = {
                "correctness_acc": correctness_accuracy(y[:, cols], p[:, cols]),
                "routing_acc": routing_accuracy(y, p),
            }
        res["by_k"][str(k)] = row
        log(
            f"    onboard k={k:5d} LOCUS corr={row['LOCUS']['correctness_acc']:.4f} "
            f"route={row['LOCUS']['routing_acc']:.4f}"
            + (
                f" | kNN corr={row['kNN']['correctness_acc']:.4f}"
                if "kNN" in row
                else ""
            )
        )
    if locus_in is not None:
        log(
            f"    onboard trained-in LOCUS corr={res['trained_in']['LOCUS']['correctness_acc']:.4f}"
        )
    res["needs_refit"] = ["MF", "IRT"]
    return res


def _drift(z_ref, z_new):
    d = np.linalg.norm(z_ref[:, None] - z_ref[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    nearest = d.min(1)
    ratio = np.linalg.norm(z_new - z_ref, axis=1) / nearest
    # does each re-embedded model's nearest reference embedding remain itself?
    cross = np.linalg.norm(z_new[:, None] - z_ref[None], axis=-1)
    ident = float((cross.argmin(1) == np.arange(len(z_ref))).mean())
    return {
        "drift_ratio_median": float(np.median(ratio)),
        "drift_ratio_max": float(ratio.max()),
        "self_identified": ident,
    }


def run_robustness(split, router, train, ns, log):
    """Re-embed every model from other evaluation sets; compare with reference."""
    y = split.y_test
    z_ref = router.model_embeddings_.copy()
    size = int(train.groupby("model").size().min())
    rng = np.random.default_rng([split.seed, 7])
    ref_keys = set(zip(train["model"], train["query"], strict=True))
    pool = split.train_rows
    fresh_mask = np.array(
        [
            (m, q) not in ref_keys
            for m, q in zip(pool["model"], pool["query"], strict=True)
        ]
    )
    fresh = pool[fresh_mask]

    def evaluate(evals):
        # Refresh every model from the new set: its embedding and, with the
        # kernel readout, the evaluations the predictor reads.
        r = copy.deepcopy(router).add_models(evals)
        z = r.model_embeddings_
        proba = r.predict_proba(split.test_queries)
        out = {
            "routing_acc": routing_accuracy(y, proba),
            "correctness_acc": correctness_accuracy(y, proba),
        }
        out.update(_drift(z_ref, z))
        return out

    res = {"reference_size": size, "overlap": {}, "subsample": {}}
    base_acc = routing_accuracy(y, router.predict_proba(split.test_queries))
    res["reference_routing_acc"] = base_acc
    for alpha in OVERLAPS:
        parts = []
        for m in split.models:
            ref_m = train[train["model"] == m]
            fresh_m = fresh[fresh["model"] == m]
            n_keep = int(round(alpha * size))
            n_new = size - n_keep
            if len(fresh_m) < n_new:
                parts = None
                break
            parts.append(ref_m.iloc[rng.choice(len(ref_m), n_keep, replace=False)])
            parts.append(fresh_m.iloc[rng.choice(len(fresh_m), n_new, replace=False)])
        if parts is None:
            log(f"    robustness overlap {alpha}: too few fresh rows, skipped")
            continue
        res["overlap"][str(alpha)] = r = evaluate(pd.concat(parts, ignore_index=True))
        log(
            f"    robust overlap={alpha:.2f} route={r['routing_acc']:.4f} "
            f"drift/nn median={r['drift_ratio_median']:.3f} max={r['drift_ratio_max']:.3f} "
            f"self-id={r['self_identified']:.2f}"
        )
    for n in ns:
        sub = split.sample(n, key=7000 + n_key(n) % 10**6)
        res["subsample"][str(n)] = r = evaluate(sub)
        log(
            f"    robust subsample n={n!s:>4} route={r['routing_acc']:.4f} "
            f"drift/nn median={r['drift_ratio_median']:.3f} self-id={r['self_identified']:.2f}"
        )
    return res


def run_cost(data, split, fitted, base, train):
    """Cost-quality curve of every fitted router on the test queries.

    LOCUS's curve is read from the default router fitted *with* the costs on
    the same trained embedder (no retraining): with costs its shrinkage is
    chosen below 1, so that the cost weight has per-query estimates to trade
    (fitted without costs it may choose 1, where the curve is whole-traffic).
    """
    costs_model = np.array([data.model_costs[m] for m in split.models])
    cq = data.query_costs.loc[split.test_queries, list(split.models)].to_numpy()
    y = split.y_test
    sb = list(split.models).index(base["single_best_model"])
    sb_cost = float(np.nanmean(cq[:, sb]))
    out = {
        "single_best": {
            "model": base["single_best_model"],
            "accuracy": base["single_best_acc"],
            "cost": sb_cost,
        },
        "models": {
            m: {"accuracy": float(y[:, j].mean()), "cost": float(np.nanmean(cq[:, j]))}
            for j, m in enumerate(split.models)
        },
        "routers": {},
    }
    for name, (router, proba) in fitted.items():
        shrinkage = None
        if name == "LOCUS":
            router = LocusRouter(FrozenEstimator(router.embedder_)).fit(
                train, model_costs=data.model_costs
            )
            proba = router.predict_proba(split.test_queries)
            shrinkage = router.shrinkage_
        pts = cost_curve(y, proba, costs_model, cq)
        match = cheapest_matching(pts, base["single_best_acc"])
        out["routers"][name] = {
            "curve": pts,
            "cost_to_match_single_best": match,
            "cost_ratio_to_single_best": None if match is None else match / sb_cost,
            "acc_at_lambda0": pts[0]["accuracy"],
            "cost_at_lambda0": pts[0]["cost"],
            "best_accuracy": max(p["accuracy"] for p in pts),
        }
        if shrinkage is not None:
            out["routers"][name]["shrinkage_with_costs"] = float(shrinkage)
    return out


# ----------------------------------------------------------------- summary
def mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values)),
        "n": len(values),
    }


def summarise(runs):
    """Aggregate per-seed numbers into mean/std tables."""
    summary = {"main": {}, "onboarding": {}, "robustness": {}, "cost": {}}
    by_n = {}
    for run in runs:
        for n, block in run["main"].items():
            by_n.setdefault(n, []).append(block)
    for n, blocks in by_n.items():
        s = {
            key: mean_std([b["base"][key] for b in blocks])
            for key in (
                "oracle_acc",
                "single_best_acc",
                "evals_per_model_median",
                "n_test_queries",
            )
        }
        s["routers"] = {}
        for name in blocks[0]["routers"]:
            keys = blocks[0]["routers"][name].keys()
            s["routers"][name] = {
                k: mean_std([b["routers"][name].get(k) for b in blocks]) for k in keys
            }
        summary["main"][n] = s
    onb = [r["onboarding"] for r in runs if r.get("onboarding")]
    if onb:
        s = {"trained_in": {}, "by_k": {}}
        for name in onb[0]["trained_in"]:
            s["trained_in"][name] = {
                k: mean_std([o["trained_in"][name][k] for o in onb])
                for k in onb[0]["trained_in"][name]
            }
        for k in onb[0]["by_k"]:
            s["by_k"][k] = {
                name: {
                    key: mean_std([o["by_k"][k][name][key] for o in onb])
                    for key in onb[0]["by_k"][k][name]
                }
                for name in onb[0]["by_k"][k]
            }
        summary["onboarding"] = s
    rob = [r["robustness"] for r in runs if r.get("robustness")]
    if rob:
        s = {"reference_size": rob[0]["reference_size"]}
        for part in ("overlap", "subsample"):
            s[part] = {
                key: {
                    m: mean_std([r[part][key][m] for r in rob if key in r[part]])
                    for m in rob[0][part][key]
                }
                for key in rob[0][part]
            }
        summary["robustness"] = s
    costs = [r["cost"] for r in runs if r.get("cost")]
    if costs:
        s = {
            "single_best_acc": mean_std([c["single_best"]["accuracy"] for c in costs]),
            "single_best_cost": mean_std([c["single_best"]["cost"] for c in costs]),
            "single_best_model": costs[0]["single_best"]["model"],
            "routers": {},
        }
        for name in costs[0]["routers"]:
            s["routers"][name] = {
                k: mean_std([c["routers"][name][k] for c in costs])
                for k in ("cost_to_match_single_best", "cost_ratio_to_single_best",
                          "acc_at_lambda0", "cost_at_lambda0", "best_accuracy")
            }  # fmt: skip
            # Relaxed target: 99 % of the single best model's accuracy.
            ratios = []
            for c in costs:
                match = cheapest_matching(
                    c["routers"][name]["curve"], 0.99 * c["single_best"]["accuracy"]
                )
                ratios.append(
                    None if match is None else match / c["single_best"]["cost"]
                )
            s["routers"][name]["cost_ratio_at_99pct_single_best"] = mean_std(ratios)
            s["routers"][name]["matched_in_seeds"] = sum(
                c["routers"][name]["cost_to_match_single_best"] is not None
                for c in costs
            )
            chosen = [c["routers"][name].get("shrinkage_with_costs") for c in costs]
            if any(v is not None for v in chosen):
                s["routers"][name]["shrinkage_with_costs"] = chosen
        summary["cost"] = s
    return summary


# ------------------------------------------------------------------ markdown
def _fmt(ms, digits=3, pct=False):
    if ms is None:
        return "–"
    if ms["n"] > 1:
        return f"{ms['mean']:.{digits}f} ± {ms['std']:.{digits}f}"
    return f"{ms['mean']:.{digits}f}"


def markdown_section(result):
    s = result["summary"]
    lines = [
        f"## {result['dataset']}",
        "",
        f"{result['description']}.  ",
        f"Date {result['date']}, commit `{result['git_commit']}`"
        + (
            f" + {len(result['git_dirty_package_files'])} uncommitted package files"
            if result.get("git_dirty_package_files")
            else ""
        )
        + f", seeds {result['seeds']}, "
        f"mode `{result['mode']}`, wall time {result['wall_s'] / 60:.1f} min.  ",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, torch "
        f"{result['machine']['torch']} ({result['machine']['torch_threads']} threads).  ",
        f"LOCUS: `{json.dumps(result['settings']['locus'])}`.  ",
        f"Peers: `{json.dumps(result['settings']['peers'])}`.",
    ]
    if result.get("notes"):
        lines += ["", *[f"- {note}" for note in result["notes"]]]
    lines += [
        "",
        "### Routing (test queries every model has a score for; mean ± population std over seeds, ddof=0)",
        "",
    ]
    for n, block in s["main"].items():
        lines += [
            f"**n = {n} training evaluations per model** (median actually used "
            f"{_fmt(block['evals_per_model_median'], 0)}; {_fmt(block['n_test_queries'], 0)} test "
            f"queries; oracle {_fmt(block['oracle_acc'])}, single best chosen on train "
            f"{_fmt(block['single_best_acc'])})",
            "",
            "| router | routing acc | correctness acc | log-loss | fit s | embed s | ms/query | distinct routed |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, r in block["routers"].items():
            lines.append(
                f"| {name} | {_fmt(r['routing_acc'])} | {_fmt(r['correctness_acc'])} | "
                f"{_fmt(r['log_loss'])} | {_fmt(r['fit_s'], 1)} | "
                f"{_fmt(r.get('embed_s'), 2)} | {_fmt(r['latency_ms_per_query'], 3)} | "
                f"{_fmt(r['distinct_routed'], 1)} |"
            )
        chosen = [
            run["main"][n]["routers"]["LOCUS"].get("shrinkage")
            for run in result["runs"]
            if "LOCUS" in run["main"].get(n, {}).get("routers", {})
        ]
        if chosen and None not in chosen:
            lines += [
                "",
                'LOCUS is the default `LocusRouter` (`shrinkage="auto"`); the shrinkage '
                f"it chose at fit, per seed: {', '.join(f'{c:g}' for c in chosen)}.",
            ]
        lines.append("")
    onb = s.get("onboarding")
    if onb:
        tin = onb["trained_in"]
        lines += [
            "### Onboarding (a quarter of the models held out; correctness acc of the held-out models on test queries)",
            "",
            f"Trained in (fitted on all models): LOCUS (plain P(correct)) {_fmt(tin.get('LOCUS', {}).get('correctness_acc'))}, "
            f"kNN {_fmt(tin.get('kNN', {}).get('correctness_acc'))}, "
            f"MF {_fmt(tin.get('MF', {}).get('correctness_acc'))}, "
            f"IRT {_fmt(tin.get('IRT', {}).get('correctness_acc'))}. "
            "MF and IRT need a refit to onboard; kNN onboards by re-indexing (no training).",
            "",
            "| k evals of new model | LOCUS add_models corr acc (plain P(correct)) | LOCUS pool routing acc | LOCUS add s | kNN corr acc | kNN pool routing acc |",
            "|---|---|---|---|---|---|",
        ]
        for k, row in onb["by_k"].items():
            lo, kn = row["LOCUS"], row.get("kNN", {})
            lines.append(
                f"| {k} | {_fmt(lo['correctness_acc'])} | {_fmt(lo['routing_acc'])} | "
                f"{_fmt(lo['add_s'], 2)} | {_fmt(kn.get('correctness_acc'))} | {_fmt(kn.get('routing_acc'))} |"
            )
        lines.append("")
    rob = s.get("robustness")
    if rob:
        lines += [
            f"### Robustness (LOCUS; reference = each model's {rob['reference_size']} training evaluations)",
            "",
            "drift = ‖z′ − z‖ / distance from z to the nearest other model; self-id = share of "
            "models whose nearest reference embedding is their own.",
            "",
            "| evaluation set | routing acc | correctness acc | drift median | drift max | self-id |",
            "|---|---|---|---|---|---|",
        ]
        for part, label in (
            ("overlap", "overlap α = {}"),
            ("subsample", "random subsample n = {}"),
        ):
            for key, r in rob[part].items():
                lines.append(
                    f"| {label.format(key)} | {_fmt(r['routing_acc'])} | {_fmt(r['correctness_acc'])} | "
                    f"{_fmt(r['drift_ratio_median'])} | {_fmt(r['drift_ratio_max'])} | "
                    f"{_fmt(r['self_identified'], 2)} |"
                )
        lines.append("")
    cost = s.get("cost")
    if cost:
        lines += [
            f"### Cost–quality (routing on argmax P(correct) − λ·mean train cost; realised per-query cost; n = {result['cost_n']})",
            "",
            f"Single best model on train: {cost['single_best_model']}, test acc "
            f"{_fmt(cost['single_best_acc'])}, mean cost/query ${_fmt(cost['single_best_cost'], 6)}.",
            "",
            "| router | acc at λ=0 | cost at λ=0 ($/query) | best acc on curve | cost to match single best | ratio to single best cost | seeds matched | cost ratio at 99 % of single best acc |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, r in cost["routers"].items():
            lines.append(
                f"| {name} | {_fmt(r['acc_at_lambda0'])} | {_fmt(r['cost_at_lambda0'], 6)} | "
                f"{_fmt(r['best_accuracy'])} | {_fmt(r['cost_to_match_single_best'], 6)} | "
                f"{_fmt(r['cost_ratio_to_single_best'], 2)} | {r['matched_in_seeds']}/{len(result['seeds'])} | "
                f"{_fmt(r.get('cost_ratio_at_99pct_single_best'), 2)} |"
            )
        lines.append("")
        chosen = cost["routers"].get("LOCUS", {}).get("shrinkage_with_costs")
        if chosen:
            lines += [
                "LOCUS's curve is the default router fitted with the costs on the "
                "same trained embedder (no retraining); the shrinkage it chose, per "
                "seed: "
                + ", ".join("–" if v is None else f"{v:g}" for v in chosen)
                + ".",
                "",
            ]
    return "\n".join(lines)


def rebuild(out_dir):
    """Recompute every stored result's summary from its per-seed runs (so a
    new column in the tables needs no re-run), then rewrite the README."""
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        if "runs" not in result or "dataset" not in result:
            continue
        result["summary"] = summarise(result["runs"])
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=float)
    return write_readme(out_dir)


def _run_tag(result, path):
    """The run's ``--tag``: recorded in the JSON since 2026-12-06; for older
    files read from the name ``<dataset>_<date>_<tag>.json`` (a name of
    another form counts as a tag: not a file this script wrote)."""
    if "tag" in result:
        return result["tag"]
    stem = os.path.splitext(os.path.basename(path))[0]
    untagged = f"{result['dataset']}_{result['date']}"
    if stem == untagged:
        return ""
    return stem[len(untagged) + 1 :] if stem.startswith(untagged + "_") else stem


def readme_exclusion(result, path):
    """Why the stored run at ``path`` gives no README section, or None.

    README.md shows the benchmark as it is set here: per data set the latest
    untagged run of every router in ``ROUTERS`` at n = 256 and all (--tiny:
    32 and all; a run may have more n), with every experiment and no
    ``--locus`` override but ``device``. A tagged run is an ablation, and a
    run of fewer routers, n or experiments would drop the rest of the
    section; both stay in their JSON files. Experiments and overrides are
    recorded since 2026-12-06 (older files count as having none left out).
    """
    tag = _run_tag(result, path)
    if tag:
        return f"tagged {tag!r}"
    settings = result.get("settings", {})
    routers = settings.get("routers")
    if routers is None:  # not recorded: the routers of every n
        blocks = result["summary"]["main"].values()
        routers = set.intersection(*[set(b["routers"]) for b in blocks] or [set()])
    missing = [r for r in ROUTERS if r not in routers]
    if missing:
        return f"partial: routers {missing} not run"
    needed = (
        ("32", "all") if result.get("mode") == "tiny" else tuple(map(str, QUICK_NS))
    )
    missing = [n for n in needed if n not in result.get("ns", [])]
    if missing:
        return f"partial: n {missing} not run"
    missing = [
        e for e in EXPERIMENTS if e not in settings.get("experiments", EXPERIMENTS)
    ]
    if missing:
        return f"partial: experiments {missing} not run"
    over = [
        o for o in settings.get("locus_overrides", []) if not o.startswith("device=")
    ]
    if over:
        return f"--locus overrides {over}"
    return None


def write_readme(out_dir):
    """Rewrite ``<out_dir>/README.md``: one section per data set, from its
    latest run that :func:`readme_exclusion` admits."""
    latest = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
        if "summary" not in result or "dataset" not in result:
            continue
        if readme_exclusion(result, path) is not None:
            continue
        key = result["dataset"]
        if key not in latest or result["timestamp"] >= latest[key]["timestamp"]:
            latest[key] = result
    order = [d for d in ALL_DATA if d in latest] + sorted(set(latest) - set(ALL_DATA))
    text = [
        "# Routing benchmark results",
        "",
        "Generated by `python benchmarks/routing.py` (per data set the latest untagged "
        "run of every router, n and experiment; tagged and partial runs, and the raw "
        "numbers, are in the JSON files next to this one). Every router is fitted on the "
        "same training rows with the same query encodings; scores are on the test "
        "queries that every pool model has a score for. Every ± is the population "
        "standard deviation over seeds (ddof=0). Correctness acc counts P(correct) "
        "and the score on the same side of 0.5: on graded scores (Shaberi) it rewards "
        "guessing the side of 0.5, not the mean score, so read log-loss there.",
        "",
    ]
    text += [markdown_section(latest[d]) for d in order]
    path = os.path.join(out_dir, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
    return path


def run_seed(data, seed, settings, routers, experiments, threads, quiet):
    """Every experiment on one seed's split (a unit of work for one process)."""
    set_threads(threads)
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    ns, ref_n, onboard_ks, robust_ns, which = experiments
    split = Split(data, seed)
    log(
        f"  seed {seed}: {len(split.models)} models, {len(split.test_queries)} test queries"
    )
    run = {"seed": seed, "main": {}}
    for n in ns:
        base, scores, fitted, train = run_main(data, split, n, settings, routers, log)
        run["main"][str(n)] = {"base": base, "routers": scores}
        if n != ref_n:
            continue
        if "onboarding" in which and "LOCUS" in fitted:
            run["onboarding"] = run_onboarding(
                data, split, train, settings, fitted, onboard_ks, log
            )
        if "robustness" in which and "LOCUS" in fitted:
            run["robustness"] = run_robustness(
                split, fitted["LOCUS"][0], train, robust_ns, log
            )
        if "cost" in which and data.query_costs is not None:
            run["cost"] = run_cost(data, split, fitted, base, train)
    return run


# --------------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--data", nargs="+", default=["mmlu-open"], choices=list(ALL_DATA) + ["evals"]
    )
    p.add_argument(
        "--evals", default=None, help="long-format evals file (adds data 'evals')"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="n in {256, all}; onboarding/robustness on a reduced grid",
    )
    p.add_argument(
        "--tiny",
        action="store_true",
        help="smoke run (tests): tiny LOCUS and peers, few n, and a small "
        "synthetic pool (other data sets keep their size)",
    )
    p.add_argument("--seeds", nargs="+", type=non_negative_int, default=[0, 1, 2])
    p.add_argument(
        "--n",
        nargs="+",
        type=n_or_all,
        default=None,
        help="training evaluations per model (ints >= 1 or 'all')",
    )
    p.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=ROUTERS)
    p.add_argument(
        "--experiments",
        nargs="+",
        default=list(EXPERIMENTS),
        choices=list(EXPERIMENTS),
    )
    p.add_argument(
        "--encoder", default=None, help="sentence-transformers model directory"
    )
    p.add_argument(
        "--locus",
        nargs="*",
        type=locus_setting(),
        default=[],
        metavar="KEY=VALUE",
        help="override LOCUS settings, e.g. dropout=0.2 early_stopping=valid_loss",
    )
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--tag", default="", help="suffix of the JSON file name")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="torch threads (default 1: the machine is shared; oversubscribed "
        "OpenMP threads slow every process down many times)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="seeds run in parallel processes (default: one per core, at most "
        "one per seed)",
    )
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="re-summarise the JSON results in --out and rewrite its README; no runs",
    )
    return p.parse_args(argv)  # fmt: skip


def set_threads(n):
    import torch

    torch.set_num_threads(n)


def parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def update_settings(settings, items):
    """Set ``settings[key]`` from each ``KEY=VALUE`` of ``items`` (``--locus``),
    the value read as JSON where it parses (lists as tuples) and as text
    otherwise.

    >>> s = {}
    >>> update_settings(s, ["enc_size=[8,32]", "max_epochs=1", "device=cpu"])
    >>> s
    {'enc_size': (8, 32), 'max_epochs': 1, 'device': 'cpu'}
    """
    for item in items:
        key, _, value = item.partition("=")
        value = parse_value(value)
        settings[key] = tuple(value) if isinstance(value, list) else value


def main(argv=None):
    args = parse_args(argv)
    if args.rebuild:
        print(f"wrote {rebuild(args.out)}")
        return {}
    set_threads(args.threads)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    data_names = list(args.data)
    if args.evals and "evals" not in data_names:
        data_names.append("evals")
    if args.n:
        ns = list(args.n)
    elif args.tiny:
        ns = [32, "all"]
    elif args.quick:
        ns = list(QUICK_NS)
    else:
        ns = list(FULL_NS)
    settings = {"locus": dict(LOCUS_PARAMS), "peers": copy.deepcopy(PEER_PARAMS)}
    notes = []
    if args.tiny:
        settings["locus"].update(TINY_LOCUS)
        for k, v in TINY_PEERS.items():
            settings["peers"][k].update(v)
        notes.append("TINY smoke settings: numbers are not meaningful")
    update_settings(settings["locus"], args.locus)
    onboard_ks = (
        [16, 32] if args.tiny else ([32, 128, 1024] if args.quick else list(ONBOARD_KS))
    )
    robust_ns = (
        [16, 32] if args.tiny else ([64, 256, 1024] if args.quick else list(ROBUST_NS))
    )
    if args.quick:
        notes.append(
            f"--quick: n in {ns}; onboarding k in {onboard_ks}; robustness subsamples "
            f"{robust_ns}; epochs and model sizes unchanged"
        )
    # Every data set before the first fit: a missing one must not end the run
    # after hours of work on the others.
    _data.require_shared(data_names)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name in data_names:
        t_start = time.perf_counter()
        log(f"== {name}: loading")
        data = _data.load(
            name, encoder=args.encoder, evals_path=args.evals, tiny=args.tiny
        )
        log(f"   {data.description}; {len(data.evals)} rows")
        ref_n = 256 if 256 in ns else (32 if args.tiny and 32 in ns else next(
            (n for n in ns if n != "all"), "all"))  # fmt: skip
        experiments = (ns, ref_n, onboard_ks, robust_ns, args.experiments)
        jobs = min(args.jobs or os.cpu_count() or 1, len(args.seeds))
        # One process per seed (seeds are independent and each fit uses
        # args.threads threads): a quick run uses every core of the machine.
        runs = Parallel(n_jobs=jobs)(
            delayed(run_seed)(data, seed, settings, args.routers, experiments,
                              args.threads, args.quiet)
            for seed in args.seeds
        )  # fmt: skip
        now = datetime.datetime.now()
        result = {
            "dataset": data.name,
            "description": data.description,
            "date": now.strftime("%Y-%m-%d"),
            "timestamp": now.isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "git_dirty_package_files": git_dirty(),
            "tag": args.tag,
            "seeds": list(args.seeds),
            "mode": "tiny" if args.tiny else ("quick" if args.quick else "full"),
            "ns": [str(n) for n in ns],
            "cost_n": str(ref_n),
            "machine": machine_info(settings["locus"].get("device")),
            "settings": {
                "locus": {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in settings["locus"].items()
                },
                "peers": settings["peers"],
                "onboard_ks": onboard_ks,
                "robust_ns": robust_ns,
                "overlaps": list(OVERLAPS),
                "routers": list(args.routers),
                "experiments": list(args.experiments),
                "locus_overrides": list(args.locus),
            },
            "notes": notes,
            "runs": runs,
            "summary": summarise(runs),
        }
        result["wall_s"] = time.perf_counter() - t_start
        suffix = f"_{args.tag}" if args.tag else ""
        path = os.path.join(args.out, f"{data.name}_{result['date']}{suffix}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=float)
        log(f"   wrote {path} ({result['wall_s'] / 60:.1f} min)")
        excluded = readme_exclusion(result, path)
        if excluded:
            log(f"   not in {args.out}/README.md: {excluded}")
        results[data.name] = result
        readme = write_readme(
            args.out
        )  # after every data set: partial runs keep theirs
        log(f"wrote {readme}")
    return results


if __name__ == "__main__":
    main()
