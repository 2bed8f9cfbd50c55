"""Can a router that sees queries only through their encodings find the tasks?

Every router of this project (LOCUS, kNN, MF, ...) knows a query only by its
encoding (MiniLM by default). The per-task targets of the embedding work --
route like the per-task best model, fingerprint models like their per-task
score profile -- use the task labels. This script measures, on
``embedding_quality.py``'s pools, splits and rows, how much of the task
structure the encodings carry and what that is worth (no LOCUS fit, a few
minutes on two cores):

- *probe accuracy*: a logistic regression (C = 10) from the unit-normalised
  encodings of the training queries to their task label, scored on the test
  queries; beside it the majority task's share;
- routing on the test queries every model answered: the single best model and
  the per-task best chosen on the same n training rows per model, with the
  test query's true task and with the task the probe predicts from its
  encoding (a supervised stand-in for what an encoding-only router could
  learn about tasks at best), and the task oracle (each task's best model on
  the test answers);
- the participation ratio of the per-task score profile (as in
  ``embedding_quality.py``), and its *split-half* participation ratio: each
  model's rows are split into two random halves, and the ratio is taken of
  the eigenvalues of the symmetrised cross-covariance of the two halves'
  centred profiles. Sampling noise is independent between halves, so it
  drops out of the cross-covariance: this is the dimension of the profile's
  signal, which the plain ratio overstates when each task has few rows;
- the same two ratios, routing by the argmax and self-identification for
  *label-free* profiles: each model's rows averaged near every test query
  from the encodings alone (the probe profile's kernel smoother, and the mean
  of the model's 16 or 64 nearest rows), against the 16 nearest with the task
  appended to the encodings, the per-task profile read at every test query,
  and the same table over 12 k-means clusters of the encodings instead of
  the tasks. What the encodings let any label-free fingerprint see of the
  models is the reference for the embedding's participation-ratio and
  self-identification targets.

Usage::

    python benchmarks/task_visibility.py [--pools bfcl shaberi mmlu-open]
        [--seeds 0 1 2] [--n 256 all]
"""

# ruff: noqa: E501  (markdown tables are long by nature)

import argparse
import datetime
import json
import os
import sys
import time
from functools import partial

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import embedding_quality as eq  # noqa: E402
import headroom  # noqa: E402
import routing  # noqa: E402  (paths, offline env)
from _args import n_or_all  # noqa: E402
from _provenance import stamp  # noqa: E402

from locus_sklearn.metrics import routing_accuracy  # noqa: E402

POOLS = ("bfcl", "shaberi", "mmlu-open", "routerbench")


participation_ratio = eq.participation_ratio


def split_half_pr(profile, rows, rng):
    """Participation ratio of the cross-covariance of two half-row profiles."""
    halves = ([], [])
    for idx in rows.groupby("model").indices.values():
        idx = rng.permutation(idx)
        halves[0].append(idx[: len(idx) // 2])
        halves[1].append(idx[len(idx) // 2 :])
    return eq.split_half_ratio(*(profile(rows.iloc[np.concatenate(h)]) for h in halves))


def unit_encodings(data, queries):
    X = np.stack([data.encodings[q] for q in queries]).astype(np.float64)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)


def run_seed(data, seed, ns):
    from sklearn.linear_model import LogisticRegression

    split = routing.Split(data, seed)
    fp = eq.Fingerprints(data, split, seed=seed)
    y = split.y_test
    train_q = split.train_rows["query"].unique()
    probe = LogisticRegression(C=10.0, max_iter=3000)
    probe.fit(unit_encodings(data, train_q), fp.task_of[train_q].to_numpy())
    true_task = fp.task_of[split.test_queries].to_numpy()
    predicted = probe.predict(unit_encodings(data, split.test_queries))
    # What a router that knows queries by their encodings alone can see of the
    # models: each model's rows averaged near every test query, from the
    # encodings alone, then with the task appended to every encoding. Their
    # split-half ratio is the dimension of the models' differences that the
    # encodings make visible: the label-free reference for the
    # participation-ratio target. The k-nearest-rows averages pull nothing
    # toward the model's mean; the probe profile's kernel smoother
    # (fp.profile_at) does, through its pseudo-row. Beside them the per-task
    # profile read at every test query (each query gets its task's column):
    # the task profile with tasks weighed by their number of queries, as any
    # query-level profile weighs them.
    tasked = eq.with_task_features(data, 1.0)
    test_probes = unit_encodings(data, split.test_queries)
    tasked_probes = unit_encodings(tasked, split.test_queries)
    test_task = np.searchsorted(fp.tasks, fp.task_of[split.test_queries].to_numpy())
    # The per-task profile's label-free twin: the same table over 12 k-means
    # clusters of the encodings (headroom.py's clusters; 12 = BFCL's number
    # of categories), read at the test queries.
    clusters = headroom.encoding_clusters(data, 12, seed)
    test_cluster = clusters[split.test_queries].to_numpy()
    smoothers = {
        "per-task profile at the test queries": lambda r: fp.task_profile(r)[
            :, test_task
        ],
        "12-cluster profile at the test queries": lambda r: fp.task_profile(
            r, clusters
        )[:, test_cluster],
        "label-free kernel profile": partial(fp.profile_at, probes=test_probes),
        **{
            f"label-free {k}-NN profile": partial(
                fp.knn_profile_at, probes=test_probes, k=k
            )
            for k in (16, 64)
        },
        "16-NN profile, task visible": partial(
            fp.knn_profile_at, probes=tasked_probes, k=16, encodings=tasked.encodings
        ),
    }
    # Self-identification (embedding_quality.py's measure and disjoint sets)
    # of each profile, the per-task one included.
    pairs = eq.self_id_pairs(split, seed)
    self_id = {
        name: eq.self_identifications(f, pairs)[0]
        for name, f in {"per-task profile": fp.task_profile, **smoothers}.items()
    }
    task_seen = fp.task_of.copy()
    task_seen[split.test_queries] = predicted
    out = {
        "seed": seed,
        "n_test": len(y),
        "probe_accuracy": float((predicted == true_task).mean()),
        "majority_share": float(
            fp.task_of[train_q].value_counts(normalize=True).iloc[0]
        ),
        "self_id": self_id,
        "by_n": {},
    }
    for n in ns:
        train = split.training_rows(n)
        strength = train.groupby("model")["score"].mean().reindex(split.models)
        best = {
            "single best": float(y[:, int(np.argmax(strength.to_numpy()))].mean()),
            "per-task best (true task)": routing_accuracy(
                y,
                eq.per_task_best(
                    train, fp.task_of, split.models, fp.tasks, split.test_queries
                ),
            ),
            "per-task best (task from encoding)": routing_accuracy(
                y,
                eq.per_task_best(
                    train, task_seen, split.models, fp.tasks, split.test_queries
                ),
            ),
            "task oracle": eq.task_oracle(y, true_task),
        }
        profile = fp.task_profile(train)
        centred = profile - profile.mean(0)
        cell = {
            "routing": best,
            "profile_pr": participation_ratio(centred.T @ centred),
            "profile_split_half_pr": split_half_pr(
                fp.task_profile, train, np.random.default_rng([seed, 53])
            ),
        }
        for key, smoothed in smoothers.items():
            P = smoothed(train)
            best[f"argmax of the {key}"] = routing_accuracy(y, P.T)
            P = P - P.mean(0)
            cell[f"{key} PR"] = participation_ratio(P.T @ P)
            cell[f"{key} split-half PR"] = split_half_pr(
                smoothed, train, np.random.default_rng([seed, 53])
            )
        out["by_n"][str(n)] = cell
    return out


def summarise(runs):
    def ms(values):
        return {"mean": float(np.mean(values)), "std": float(np.std(values))}

    out = {
        "probe_accuracy": ms([r["probe_accuracy"] for r in runs]),
        "majority_share": ms([r["majority_share"] for r in runs]),
        "self_id": {
            name: {k: ms([r["self_id"][name][k] for r in runs]) for k in ks}
            for name, ks in runs[0]["self_id"].items()
        },
        "by_n": {},
    }
    for n in runs[0]["by_n"]:
        rs = [r["by_n"][n] for r in runs]
        out["by_n"][n] = {
            "routing": {k: ms([r["routing"][k] for r in rs]) for k in rs[0]["routing"]},
            **{k: ms([r[k] for r in rs]) for k in rs[0] if k != "routing"},
        }
    return out


def markdown(results):
    fmt = lambda s, d=3: f"{s['mean']:.{d}f} ± {s['std']:.{d}f}"  # noqa: E731
    lines = [
        "# Task visibility: how much of the task structure do the query encodings carry?",
        "",
        "Generated by `python benchmarks/task_visibility.py` (raw numbers in "
        "`task_visibility.json`); `embedding_quality.py`'s pools, seeded splits and "
        "training rows. Mean ± population std over seeds (ddof=0). *Probe*: logistic regression from the "
        "training queries' encodings to their task, accuracy on the test queries. "
        "*Per-task best (task from encoding)*: each test query routed to the best model "
        "of the task the probe predicts (chosen on the same n rows per model). "
        "*Split-half PR*: participation ratio of the cross-covariance of per-task "
        "profiles from two disjoint halves of each model's rows (sampling noise "
        "cancels). *Label-free kernel profile*: each model's rows kernel-smoothed at "
        "every test query from the encodings alone (the probe profile's smoother: "
        "weights exp((cos − 1) / 0.1) and one pseudo-row at the model's mean score); "
        "*label-free k-NN profile*: the mean score of the model's k rows nearest each "
        "test query (cosine of the encodings); *task visible*: the same with "
        "one-hot(task) appended to every encoding; *per-task profile at "
        "the test queries*: each test query reads its task's column, so tasks weigh "
        "by their number of queries; *12-cluster profile*: the same over 12 k-means "
        "clusters of the encodings (no label). *Self-identification*: whose nearest profile "
        "(centred cosine) from the other set is its own, as in `embedding_quality.py`.",
        "",
    ]
    for pool, r in results.items():
        s = r["summary"]
        lines += [
            f"## {pool}",
            "",
            f"{r['description']}. Seeds {r['seeds']}; date {r['date']}, commit "
            f"`{r['commit']}`; {r['wall_s']:.0f} s.",
            "",
            f"Task probe accuracy {fmt(s['probe_accuracy'])} "
            f"(majority task {fmt(s['majority_share'])}).",
            "",
        ]
        ns = list(s["by_n"])
        lines += [
            "| | " + " | ".join(f"n = {n}" for n in ns) + " |",
            "|---|" + "---|" * len(ns),
        ]
        for key in s["by_n"][ns[0]]["routing"]:
            lines.append(
                f"| {key} | "
                + " | ".join(fmt(s["by_n"][n]["routing"][key]) for n in ns)
                + " |"
            )
        labels = {
            "profile_pr": "per-task profile PR",
            "profile_split_half_pr": "per-task profile split-half PR",
        }
        for key in s["by_n"][ns[0]]:
            if key == "routing":
                continue
            label = labels.get(key, key)
            lines.append(
                f"| {label} | "
                + " | ".join(fmt(s["by_n"][n][key], 2) for n in ns)
                + " |"
            )
        ks = sorted({k for v in s["self_id"].values() for k in v}, key=int)
        lines += [
            "",
            "| self-identification from two disjoint sets of k rows | "
            + " | ".join(f"k = {k}" for k in ks)
            + " |",
            "|---|" + "---|" * len(ks),
        ]
        for name, v in s["self_id"].items():
            cells = (fmt(v[k], 2) if k in v else "–" for k in ks)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pools", nargs="+", default=list(POOLS), choices=POOLS + ("specialists",)
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--n", nargs="+", type=n_or_all, default=[256, "all"],
        help="ints >= 1 or 'all'",
    )  # fmt: skip
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    # At the start: a folder that cannot be made must not lose a whole run.
    os.makedirs(args.out, exist_ok=True)
    eq.require_pools(args.pools)
    ns = list(args.n)
    started = stamp()  # the code of the start, as in embedding_quality
    results = {}
    for pool in args.pools:
        t0 = time.perf_counter()
        data = eq.load_pool(pool)
        pool_ns = ns
        if pool == "shaberi":  # 256 training queries: n = 256 is every row
            pool_ns = sorted({256 if n == "all" else n for n in ns}, key=str)
        runs = [run_seed(data, seed, pool_ns) for seed in args.seeds]
        results[pool] = {
            "description": data.description,
            "seeds": args.seeds,
            "date": datetime.date.today().isoformat(),
            "commit": started["commit"],
            "machine": started["machine"],
            "runs": runs,
            "summary": summarise(runs),
            "wall_s": time.perf_counter() - t0,
        }
        print(f"{pool}: {json.dumps(results[pool]['summary'])}", flush=True)
    with open(
        os.path.join(args.out, "task_visibility.json"), "w", encoding="utf-8"
    ) as f:
        json.dump(results, f, indent=1)
    text = markdown(results)
    with open(os.path.join(args.out, "task_visibility.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return results


if __name__ == "__main__":
    main()
