"""Which model is best: raw mean score against a difficulty-adjusted effect.

    python benchmarks/leader_estimate.py [--data mmlu-open mmlu-all routerbench bfcl shaberi]
        [--seeds 0 1 2] [--n 64 128 256] [--query-effects fixed|shrunk]
        [--out benchmarks/results/leader_estimate.json]

Below "all rows" each model's training rows are its own random sample of the
training queries, so a model's raw mean score also says how hard the queries
it drew were. The two-way additive fit ``score = mu + a_m + b_q`` (least
squares on the observed rows) takes each query's difficulty out of the model
effect ``a_m``. For every pool, seed and n this picks the leader both ways
from the training rows of ``routing.py``'s split (the rows of every recorded
figure) and reports each pick's test routing accuracy, with the best single
model on test as a ceiling. Scores only: no network is fitted and no query
is encoded (benchmarks/results/TUNING.md, session 47).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402
import routing  # noqa: E402
from _provenance import git_dirty, stamp  # noqa: E402


def additive_effects(
    model_index, query_index, score, n_models, n_queries, ridge=0.0, tol=1e-10
):
    """Model effects a_m of the least-squares fit score = mu + a_m + b_q.

    Alternating means (Gauss-Seidel on the normal equations), from a = 0, until
    no effect moves by more than ``tol``. Effects are identified up to a shift
    between a and b; the order of a, which is all that is read, is not.
    ``ridge`` (λ) shrinks the query effects: b_q = Σ residuals / (n_q + λ).

    Examples
    --------
    >>> import numpy as np
    >>> # Model 1 answered only the easy query; model 0 both: raw means
    >>> # 0.5 and 1.0, but on the shared query model 0 did as well.
    >>> a = additive_effects(np.array([0, 0, 1]), np.array([0, 1, 0]),
    ...                      np.array([1.0, 0.0, 1.0]), 2, 2)
    >>> bool(np.isclose(a[0], a[1]))
    True
    """
    mu = score.mean()
    m_count = np.bincount(model_index, minlength=n_models)
    q_count = np.bincount(query_index, minlength=n_queries)
    a = np.zeros(n_models)
    b = np.zeros(n_queries)
    for _ in range(10_000):
        b = np.bincount(query_index, score - mu - a[model_index], n_queries) / (
            q_count + ridge
        )
        a_new = (
            np.bincount(model_index, score - mu - b[query_index], n_models) / m_count
        )
        moved = np.max(np.abs(a_new - a))
        a = a_new
        if moved < tol:
            return a
    raise RuntimeError("additive fit did not converge in 10,000 sweeps")


def moment_ridge(model_index, query_index, score, n_models, n_queries):
    """λ = σ²_e / σ²_b by the method of moments (session 47's plan).

    After removing each model's raw mean, σ²_e is the pooled within-query
    variance of the residuals over queries with at least two rows, σ²_b the
    variance of those queries' mean residuals less the mean of σ²_e / n_q,
    floored at 1e-6.

    Examples
    --------
    >>> import numpy as np
    >>> # Two models, two queries each seen by both: one easy, one hard.
    >>> lam = moment_ridge(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]),
    ...                    np.array([1.0, 1.0, 0.0, 0.0]), 2, 2)
    >>> float(lam)  # no within-query spread: σ²_e = 0
    0.0
    """
    m_count = np.bincount(model_index, minlength=n_models)
    raw = np.bincount(model_index, score, n_models) / m_count
    resid = score - raw[model_index]
    q_count = np.bincount(query_index, minlength=n_queries)
    q_mean = np.bincount(query_index, resid, n_queries) / np.maximum(q_count, 1)
    shared = q_count >= 2
    rows = shared[query_index]
    within = (resid[rows] - q_mean[query_index][rows]) ** 2
    sigma_e = within.sum() / (q_count[shared] - 1).sum()
    sigma_b = max(q_mean[shared].var() - np.mean(sigma_e / q_count[shared]), 1e-6)
    return sigma_e / sigma_b


def run_one(split, n, query_effects="fixed"):
    rows = split.training_rows(n)
    models = split.models
    m_idx = np.searchsorted(models, rows["model"].to_numpy(dtype=object))
    queries, q_idx = np.unique(
        rows["query"].to_numpy(dtype=object), return_inverse=True
    )
    score = rows["score"].to_numpy(dtype=np.float64)
    raw = np.bincount(m_idx, score, len(models)) / np.bincount(
        m_idx, minlength=len(models)
    )
    shape = (len(models), len(queries))
    ridge = 0.0
    if query_effects == "shrunk":
        ridge = moment_ridge(m_idx, q_idx, score, *shape)
    adj = additive_effects(m_idx, q_idx, score, *shape, ridge=ridge)
    test = split.y_test.mean(axis=0)
    raw_pick, adj_pick = int(np.argmax(raw)), int(np.argmax(adj))
    return {
        "n": n,
        "ridge": float(ridge),
        "raw_leader": str(models[raw_pick]),
        "adjusted_leader": str(models[adj_pick]),
        "raw_test": float(test[raw_pick]),
        "adjusted_test": float(test[adj_pick]),
        "test_best": float(test.max()),
        "test_best_model": str(models[int(np.argmax(test))]),
        "n_test_queries": int(len(split.test_queries)),
        "training_queries": int(len(queries)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", nargs="+",
        default=["mmlu-open", "mmlu-all", "routerbench", "bfcl", "shaberi"],
    )  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--n", nargs="+", type=int, default=[64, 128, 256])
    parser.add_argument(
        "--out", default=os.path.join(_data.HERE, "results", "leader_estimate.json")
    )
    parser.add_argument(
        "--query-effects", choices=["fixed", "shrunk"], default="fixed",
        help="b_q as fixed effects, or shrunk by λ = σ²_e / σ²_b (moments)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    # Scores only: the splits and rows need no query encodings.
    _data._encodings_for = lambda ids, texts, encoder: {}
    start = time.time()
    results = {}
    for name in args.data:
        data = _data.load(name)
        results[name] = []
        for seed in args.seeds:
            split = routing.Split(data, seed)
            for n in args.n:
                r = run_one(split, n, args.query_effects) | {"seed": seed}
                results[name].append(r)
                print(name, seed, n, f"raw {r['raw_test']:.4f} ({r['raw_leader']})",
                      f"adjusted {r['adjusted_test']:.4f} ({r['adjusted_leader']})",
                      f"best {r['test_best']:.4f}", flush=True)  # fmt: skip
    out = {
        **stamp(),
        "dirty": git_dirty(),
        "args": vars(args),
        "wall_s": time.time() - start,
        "results": results,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print("\npool  n  raw  adjusted  diff  test-best (3-seed means)")
    for name, rs in results.items():
        for n in args.n:
            cell = [r for r in rs if r["n"] == n]
            raw = np.mean([r["raw_test"] for r in cell])
            adj = np.mean([r["adjusted_test"] for r in cell])
            best = np.mean([r["test_best"] for r in cell])
            print(f"{name} {n} {raw:.4f} {adj:.4f} {adj - raw:+.4f} {best:.4f}")


if __name__ == "__main__":
    main()
