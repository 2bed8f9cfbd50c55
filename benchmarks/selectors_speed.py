"""Time the portfolio selectors on random embeddings (10,000 x 128 by default).

Also compares the k-medoids swap searches on the same kernel matrix: the
``kmedoids`` package's FasterPAM (the KMedoidsSelector default) and FastPAM1
(``method="pam"``) against a hand-written numpy PAM loop (best swap per pass,
O(n^2) per pass with the FastPAM1 decomposition), on a smaller pool by
default because the numpy loop takes minutes at n=10,000.

    python benchmarks/selectors_speed.py
    python benchmarks/selectors_speed.py --data blobs --n-select 64
"""

import argparse
import time

import numpy as np

from locus_sklearn import BudgetGreedySelector, KCenterSelector, KMedoidsSelector
from locus_sklearn._selectors import (
    _distance_matrix,
    _k_center,
    _kernel_matrix,
    _pam,
    _rbf,
)


def make_embeddings(n_models, n_features, data, seed=0):
    rng = np.random.default_rng(seed)
    if data == "gaussian":
        return rng.standard_normal((n_models, n_features))
    # Families: 100 random centres, models scattered around them.
    centres = rng.standard_normal((100, n_features))
    family = rng.integers(0, 100, n_models)
    return centres[family] + 0.3 * rng.standard_normal((n_models, n_features))


def numpy_pam(K, selected, max_iter, chunk_size=256):
    """Best-improvement PAM maximising J = sum_i max_s K[s, i] (reference loop)."""
    selected = np.array(selected, dtype=np.int64)
    n, k = K.shape[0], len(selected)
    delta = np.empty((n, k))
    for n_iter in range(1, max_iter + 1):
        S = K[selected]
        nearest = np.argmax(S, axis=0)
        best = S[nearest, np.arange(n)]
        S[nearest, np.arange(n)] = -np.inf
        second = S.max(axis=0) if k > 1 else np.zeros(n)
        owner = np.zeros((n, k))
        owner[np.arange(n), nearest] = 1.0
        floor = second - best
        for start in range(0, n, chunk_size):
            diff = K[start : start + chunk_size] - best
            gain = np.maximum(diff, 0.0).sum(axis=1)
            loss = np.minimum(np.maximum(diff, floor), 0.0)
            delta[start : start + chunk_size] = gain[:, None] + loss @ owner
        delta[selected] = -np.inf
        h, s = np.unravel_index(int(np.argmax(delta)), delta.shape)
        if not delta[h, s] > 16 * n * np.finfo(np.float64).eps:
            return selected, n_iter
        selected[s] = h
    return selected, max_iter


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-models", type=int, default=10_000)
    parser.add_argument("--n-features", type=int, default=128)
    parser.add_argument("--n-select", type=int, default=32)
    parser.add_argument("--data", choices=["gaussian", "blobs"], default="gaussian")
    parser.add_argument("--metric", choices=["cosine", "euclidean"], default="cosine")
    parser.add_argument(
        "--n-swap-compare",
        type=int,
        default=2_000,
        help="pool size for the swap-search comparison (the numpy loop is slow)",
    )
    args = parser.parse_args()

    X = make_embeddings(args.n_models, args.n_features, args.data)
    k = args.n_select
    print(
        f"{args.n_models} x {args.n_features} {args.data} embeddings, "
        f"metric={args.metric}, n_select={k}"
    )

    _, t_kernel = timed(lambda: _kernel_matrix(X, args.metric, "median"))
    print(f"  kernel matrix + median bandwidth      {t_kernel:7.2f} s")
    costs = np.random.default_rng(1).uniform(1.0, 70.0, args.n_models)
    selectors = [
        ("KCenterSelector", lambda: KCenterSelector(k, metric=args.metric).fit(X)),
        ("KMedoidsSelector", lambda: KMedoidsSelector(k, metric=args.metric).fit(X)),
        (
            "BudgetGreedySelector unit costs",
            lambda: BudgetGreedySelector(float(k), metric=args.metric).fit(X),
        ),
        (
            "BudgetGreedySelector random costs",
            lambda: BudgetGreedySelector(35.0 * k, metric=args.metric).fit(
                X, costs=costs
            ),
        ),
    ]
    for name, fit in selectors:
        selector, seconds = timed(fit)
        print(
            f"  {name:36s}  {seconds:7.2f} s  "
            f"n_selected={len(selector.selected_indices_):3d}  "
            f"objective={selector.objective_:.4f}"
        )

    n = min(args.n_swap_compare, args.n_models)
    print(f"\nswap search from the k-center start, {n} models, n_select={k}")
    D, sigma = _distance_matrix(X[:n], args.metric, "median")
    start = _k_center(D, sigma, k)
    K = _rbf(D, sigma, out=D)

    def J(selected):
        return K[selected].max(axis=0).sum()

    print(f"  k-center start                         J={J(start):.4f}")
    for name, search in [
        # _pam's (selected, passes), its converged flag dropped.
        ("kmedoids FasterPAM", lambda: _pam(K.copy(), start, 300, "fasterpam")[:2]),
        (
            "kmedoids FastPAM1 (method='pam')",
            lambda: _pam(K.copy(), start, 300, "pam")[:2],
        ),
        ("numpy best-swap PAM loop", lambda: numpy_pam(K, start, 300)),
    ]:
        (selected, n_iter), seconds = timed(search)
        print(
            f"  {name:36s}  {seconds:7.2f} s  passes={n_iter:3d}  J={J(selected):.4f}"
        )


if __name__ == "__main__":
    main()
