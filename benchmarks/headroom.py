"""How far above kNN can routing go when each model is known only by task?

Routes the test queries of ``routing.py``'s splits with per-(model, task)
accuracies, where ``task`` is the data's category column (14 subjects on
MMLU-Pro), and prints them next to kNN and the single best model on the same
rows:

- *task oracle*: each task's best model, from the **test** answers — an
  upper bound for any router whose choice depends on the task alone;
- *task, all training rows*: per-task accuracies from every training row;
- *task, n rows, shrunk*: from the n training rows per model that the
  routers see, each per-task mean shrunk toward the model's overall mean with
  a prior of ``--prior`` pseudo-rows;
- *task, n rows, low rank*: a logistic model
  ``logit p(m, t) = a_m + b_t + u_m · v_t`` (rank ``--rank``, L2 penalty
  ``--l2``) fitted to the same n rows: models share task structure.
- with ``--clusters K ...``: the same shrunk and low-rank tables with the task
  replaced by the query's k-means cluster of the encodings (K clusters of all
  queries' encodings, no label): how much of the task routers' gain the
  encodings alone can give.

The task routers read the task label of each test query, which the other
routers do not get; the point is the size of the gap, not a router to use.
Nothing here is chosen on the test queries: ``--prior``, ``--rank``, ``--l2``
and ``--clusters`` are fixed before a run, and every row is reported.

Usage::

    python benchmarks/headroom.py [--data mmlu-open] [--n 256] [--seeds 0 1 2 3 4]
"""

# ruff: noqa: E501  (markdown tables are long by nature)

import argparse
import json
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _data  # noqa: E402
import routing  # noqa: E402  (sets up paths and offline env)
from _args import n_or_all, non_negative_float, positive_int  # noqa: E402
from _provenance import stamp  # noqa: E402

from locus_sklearn.metrics import routing_accuracy  # noqa: E402


def task_table(rows, task_of, models, tasks, prior=0.0):
    """(n_models, n_tasks) mean score, shrunk toward each model's mean."""
    t = pd.Categorical(task_of.reindex(rows["query"]).to_numpy(), categories=tasks)
    m = pd.Categorical(rows["model"], categories=models)
    score = rows["score"].to_numpy(dtype=float)
    sums = np.zeros((len(models), len(tasks)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (m.codes, t.codes), score)
    np.add.at(counts, (m.codes, t.codes), 1)
    overall = sums.sum(1, keepdims=True) / np.maximum(counts.sum(1, keepdims=True), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        table = (sums + prior * overall) / (counts + prior)
    # A (model, task) cell with no rows and no prior: the model's overall mean.
    return np.where(np.isnan(table), overall, table)


def low_rank_table(rows, task_of, models, tasks, rank, l2, seed):
    """P(correct) per (model, task) from a rank-``rank`` logistic model."""
    import torch

    # int64 copies: pandas codes are int8 (index tensors must be long).
    m = torch.tensor(
        pd.Categorical(rows["model"], categories=models).codes.astype(np.int64)
    )
    t = torch.tensor(
        pd.Categorical(
            task_of.reindex(rows["query"]).to_numpy(), categories=tasks
        ).codes.astype(np.int64)
    )
    y = torch.tensor(rows["score"].to_numpy(dtype=np.float64))
    g = torch.Generator().manual_seed(seed)
    a = torch.zeros(len(models), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(len(tasks), dtype=torch.float64, requires_grad=True)
    u = (
        0.1 * torch.randn(len(models), rank, generator=g, dtype=torch.float64)
    ).requires_grad_()
    v = (
        0.1 * torch.randn(len(tasks), rank, generator=g, dtype=torch.float64)
    ).requires_grad_()
    opt = torch.optim.LBFGS([a, b, u, v], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logit = a[m] + b[t] + (u[m] * v[t]).sum(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        loss = loss + l2 * (u.pow(2).sum() + v.pow(2).sum())
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return torch.sigmoid(a[:, None] + b[None, :] + u @ v.T).numpy()


def run_seed(data, seed, n, args):
    split = routing.Split(data, seed)
    task_of = data.evals.drop_duplicates("query").set_index("query")["task"]
    tasks = sorted(task_of.unique())
    models = list(split.models)
    y = split.y_test
    test_task = pd.Categorical(
        task_of.reindex(split.test_queries).to_numpy(), categories=tasks
    ).codes
    train = split.training_rows(n)
    everything = split.training_rows("all")
    out = {}
    for name in ("kNN", "SingleBest"):
        router = routing.make_router(
            name, data.encodings, seed, {"peers": routing.PEER_PARAMS}
        )
        out[name] = routing_accuracy(
            y, router.fit(train).predict_proba(split.test_queries)
        )
    oracle = np.stack([np.nanmean(y[test_task == k], 0) for k in range(len(tasks))], 1)
    per_task = {
        "task oracle (test answers)": oracle,
        "task, all training rows": task_table(everything, task_of, models, tasks),
        f"task, {n} rows, shrunk (prior {args.prior:g})": task_table(
            train, task_of, models, tasks, prior=args.prior
        ),
        f"task, {n} rows, low rank (rank {args.rank}, l2 {args.l2:g})": low_rank_table(
            train, task_of, models, tasks, args.rank, args.l2, seed
        ),
    }
    for name, table in per_task.items():
        # Rows of the (n_models, n_tasks) table, one per test query's task.
        out[name] = routing_accuracy(y, table[:, test_task].T)
    for k in args.clusters:
        cluster_of = encoding_clusters(data, k, seed)
        test_cluster = cluster_of.reindex(split.test_queries).to_numpy()
        # The task tables take labels: cluster c is the task str(c).
        task_of, labels = cluster_of.astype(str), [str(c) for c in range(k)]
        tables = {
            f"{k} clusters, {n} rows, shrunk (prior {args.prior:g})": task_table(
                train, task_of, models, labels, prior=args.prior
            ),
            f"{k} clusters, {n} rows, low rank (rank {args.rank}, l2 {args.l2:g})": (
                low_rank_table(
                    train, task_of, models, labels, args.rank, args.l2, seed
                )
            ),
        }  # fmt: skip
        for name, table in tables.items():
            out[name] = routing_accuracy(y, table[:, test_cluster].T)
    return out


def encoding_clusters(data, k, seed):
    """Each query's k-means cluster (0..k-1) of every query's encoding: a
    task label read from the encodings alone (training and test queries
    alike, as an encoder sees them; no score or label enters)."""
    from sklearn.cluster import KMeans

    queries = pd.unique(data.evals["query"])
    X = np.stack([data.encodings[q] for q in queries])
    labels = KMeans(k, n_init=4, random_state=seed).fit_predict(X)
    return pd.Series(labels, index=queries)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="mmlu-open", choices=routing.ALL_DATA)
    p.add_argument("--n", type=n_or_all, default="256", help="an int >= 1 or 'all'")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument(
        "--prior", type=non_negative_float, default=10.0,
        help="pseudo-rows of the model's mean in each shrunk cell (>= 0)",
    )  # fmt: skip
    p.add_argument("--rank", type=int, default=2)
    p.add_argument("--l2", type=float, default=1e-3)
    p.add_argument(
        "--clusters", nargs="*", type=positive_int, default=[],
        help="also route by k-means clusters of the encodings (K per value)",
    )  # fmt: skip
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)  # before the run, not after it
    routing.set_threads(1)
    started = stamp(torch_threads=1)  # the code of the start, on this machine
    n = args.n
    data = _data.load(args.data)
    if "task" not in data.evals or data.evals["task"].isna().any():
        raise SystemExit(f"--data {args.data} has no task label on every row.")
    per_seed = {}
    for seed in args.seeds:
        per_seed[seed] = run_seed(data, seed, n, args)
        print(seed, {k: round(v, 4) for k, v in per_seed[seed].items()}, flush=True)
    frame = pd.DataFrame(per_seed).T
    lines = [
        f"# Routing headroom by task: {args.data}, n={n}",
        "",
        f"{time.strftime('%Y-%m-%d')}, commit {started['commit']}; "
        "`python benchmarks/headroom.py` (routers that know each test query's task, "
        "next to kNN and the single best model on the same rows and test queries).",
        "",
        "| router | "
        + " | ".join(f"seed {s}" for s in frame.index)
        + " | mean ± population std (ddof=0) |",
        "|---|" + "---|" * (len(frame.index) + 1),
    ]
    for name in frame.columns:
        col = frame[name]
        cells = " | ".join(f"{v:.3f}" for v in col)
        lines.append(f"| {name} | {cells} | {col.mean():.3f} ± {col.std(ddof=0):.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    stem = os.path.join(args.out, f"headroom_{args.data}_{n}")
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(
            {"data": args.data, "n": str(n), "args": vars(args),
             "commit": started["commit"], "date": time.strftime("%Y-%m-%d"),
             "machine": started["machine"],
             "routing_acc": {str(s): r for s, r in per_seed.items()}},
            f, indent=1,
        )  # fmt: skip
    return per_seed


if __name__ == "__main__":
    main()
