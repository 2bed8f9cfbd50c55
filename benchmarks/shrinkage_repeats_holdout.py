"""``shrinkage_repeats`` judged on held-out training queries (no test query read).

For each pool, split (seed) and ``random_state`` offset: the training rows
that ``embedding_quality.py`` trains on (n per model) lose a fixed fifth of
the split's training queries (the *holdout*, drawn from the split's seed, the
same for every offset); the default router is fitted on the rest
(``LocusRouter(shrinkage="auto")``, the single draw of folds), and on the same
trained embedder (``FrozenEstimator``) the router choosing its shrinkage on
``--repeats`` shuffles of the folds, and the plain router (``shrinkage=None``)
for reference. Each routes the holdout queries every model answered in the
split's training rows (all their rows, not only the sampled n), and its
routing accuracy there is recorded with the shrinkage it chose and the time
the choice took. Pairs (repeated - single draw) share everything but the
folds.

Usage::

    python benchmarks/shrinkage_repeats_holdout.py --pools bfcl mmlu-open
        [--seeds 0 1 2] [--offsets 0 1000 2000] [--n 256] [--repeats 5]
        [--out DIR] [--tag TAG]
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from _args import locus_setting, n_or_all, positive_int  # noqa: E402
from _provenance import stamp, torch_device  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.metrics import routing_accuracy  # noqa: E402

HOLDOUT_SHARE = 0.2


def holdout_split(split, share=HOLDOUT_SHARE):
    """The split's held-out training queries (``share`` of them, drawn from
    the split's seed) and their dense score matrix over the split's models
    (queries every model answered in the training rows)."""
    queries = np.sort(split.train_rows["query"].unique().astype(str)).astype(object)
    rng = np.random.default_rng([split.seed, 40])
    held = set(rng.permutation(queries)[: int(round(share * len(queries)))])
    rows = split.train_rows[split.train_rows["query"].isin(held)]
    dense = rows.pivot_table(
        index="query", columns="model", values="score", aggfunc="mean"
    ).reindex(columns=split.models)
    dense = dense[dense.notna().all(axis=1)]
    return held, dense.index.to_numpy().astype(object), dense.to_numpy(float)


def run_one(data, seed, offset, n, repeats):
    split = routing.Split(data, seed)
    held, queries, y = holdout_split(split)
    train = split.training_rows(n)
    inner = train[~train["query"].isin(held)].reset_index(drop=True)
    from sklearn.frozen import FrozenEstimator

    embedder = LocusEmbedder(
        data.encodings, random_state=seed + offset, **dict(eq.SETTINGS)
    )
    t0 = time.perf_counter()
    single = LocusRouter(embedder, shrinkage="auto").fit(inner)
    fit_s = time.perf_counter() - t0
    frozen = FrozenEstimator(single.embedder_)
    t0 = time.perf_counter()
    repeated = LocusRouter(frozen, shrinkage="auto", shrinkage_repeats=repeats)
    repeated.fit(inner)
    repeated_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = LocusRouter(frozen, shrinkage="auto").fit(inner)  # the choice alone
    single_s = time.perf_counter() - t0
    assert again.shrinkage_ == single.shrinkage_
    plain = LocusRouter(frozen, shrinkage=None).fit(inner)
    out = {
        "seed": seed,
        "offset": offset,
        "n_inner_rows": len(inner),
        "n_holdout_queries": len(queries),
        "fit_s": fit_s,
        "choice_s": {"single": single_s, "repeated": repeated_s},
        "shrinkage": {"single": single.shrinkage_, "repeated": repeated.shrinkage_},
        "routing": {
            name: routing_accuracy(y, r.predict_proba(queries))
            for name, r in (
                ("single", single),
                ("repeated", repeated),
                ("plain", plain),
            )
        },
    }
    best = int(np.argmax(inner.groupby("model")["score"].mean().reindex(split.models)))
    out["routing"]["single best"] = float(y[:, best].mean())
    out["routing"]["oracle"] = float(y.max(axis=1).mean())
    return out


def summarise(fits):
    """Per pool: means of every router and the paired repeated - single."""
    d = [f["routing"]["repeated"] - f["routing"]["single"] for f in fits]
    return {
        "routing": {
            k: statistics.fmean(f["routing"][k] for f in fits)
            for k in fits[0]["routing"]
        },
        "d_repeated_single": statistics.fmean(d),
        "se": statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else None,
        "choice_s": {
            k: statistics.fmean(f["choice_s"][k] for f in fits)
            for k in ("single", "repeated")
        },
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pools", nargs="+", default=list(eq.POOLS), choices=eq.POOLS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--offsets", nargs="+", type=int, default=[0, 1000, 2000])
    p.add_argument("--n", type=n_or_all, default="256", help="an int >= 1 or 'all'")
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument(
        "--locus", nargs="*", type=locus_setting(), default=[], metavar="KEY=VALUE"
    )
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--tag", default="")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    # At the start: a folder that cannot be made must not lose a whole run.
    os.makedirs(args.out, exist_ok=True)
    eq.require_pools(args.pools)
    import torch

    torch.set_num_threads(args.threads)
    routing.update_settings(eq.SETTINGS, args.locus)
    n = args.n
    started = stamp(
        torch_threads=args.threads, device=torch_device(eq.SETTINGS.get("device"))
    )
    commit, dirty = started["commit"], routing.git_dirty()
    results = {}
    for pool in args.pools:
        data = eq.load_pool(pool)
        fits = []
        for seed in args.seeds:
            for offset in args.offsets:
                f = run_one(data, seed, offset, n, args.repeats)
                print(
                    f"{pool} seed {seed} +{offset}: shrinkage {f['shrinkage']} "
                    f"routing {json.dumps({k: round(v, 4) for k, v in f['routing'].items()})} "
                    f"choice {f['choice_s']['single']:.1f} / {f['choice_s']['repeated']:.1f} s",
                    flush=True,
                )
                fits.append(f)
        results[pool] = {
            "date": started["date"],
            "commit": commit,
            "dirty": dirty,
            "machine": started["machine"],
            "n": str(args.n),
            "repeats": args.repeats,
            "holdout_share": HOLDOUT_SHARE,
            "settings": {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in eq.SETTINGS.items()
            },
            "fits": fits,
            "summary": summarise(fits),
        }
        suffix = f"_{args.tag}" if args.tag else ""
        path = os.path.join(args.out, f"shrinkage_repeats_holdout{suffix}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1, default=float)
    return results


if __name__ == "__main__":
    main()
