"""The refinement's Gauss-Newton steps against Adam on the same objective.

``LocusEmbedder(refine_steps=...)`` moves each model's embedding to the
maximum a posteriori fit of its own rows (``locus_sklearn/_refinement.py``).
Session 28 reached it with 200 Adam steps of 0.05 (in units of the training
pool's spread); session 29 with damped Gauss-Newton steps. This script fits
the embedding benchmark's embedder (``embedding_quality.py --quick``
settings) on a pool's 256 training rows per model, then refines the same
encoder embeddings of those rows both ways and reports, per model, the
distance between the two results relative to the move, the objective
(mean BCE on the model's rows plus the prior), the gradient norm left (by
autograd, in the step units) and the time. A long Adam run (2,000 steps of
0.01) is the reference optimum. Only training rows are read: no test query
enters, and nothing is chosen here.

Usage: python benchmarks/refine_solver.py [--pools bfcl mmlu-open]
       [--seeds 0 1 2] [--out benchmarks/results] [--tag T]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from _provenance import git_commit, git_dirty, machine_info  # noqa: E402

from locus_sklearn import _refinement  # noqa: E402
from locus_sklearn._evals import check_evals  # noqa: E402

PRIOR = 0.1


def problem(module, table, X_query):
    """What every evaluation of the objective reads: the padded rows of each
    model and the kernel readout's leave-one-out features (fixed while only
    z moves; computed once)."""
    models = np.arange(table.n_models)
    query_index, score, mask = _refinement._padded_rows(table, models, "cpu")
    features = torch.as_tensor(X_query, dtype=torch.float32)
    extra = None
    if module.readout is not None:
        with torch.no_grad():
            extra = _refinement._leave_one_out_readout(
                module.readout, F.normalize(features, dim=-1), query_index, score, mask
            )
    return module, features, query_index, score, mask, extra


def objective(rows, z0, scale, z):
    """Each model's refinement objective at z (B,), differentiable in z."""
    module, features, query_index, score, mask, extra = rows
    logits = module.predictor(z, features, query_index, extra)
    bce = F.binary_cross_entropy_with_logits(
        logits, score, weight=mask.float(), reduction="none"
    )
    delta = (z - torch.as_tensor(z0)) / torch.as_tensor(scale)
    return bce.sum(1) / mask.sum(1) + PRIOR * delta.square().mean(1)


def adam(rows, z0, scale, steps, step_size):
    """Session 28's solver: ``steps`` Adam steps on δ (z = z0 + scale ⊙ δ),
    all models at once (Adam is per coordinate, so they do not interact)."""
    z0_t, scale_t = torch.as_tensor(z0), torch.as_tensor(scale)
    delta = torch.zeros_like(z0_t, requires_grad=True)
    optimizer = torch.optim.Adam([delta], lr=step_size)
    for _ in range(steps):
        z = z0_t + scale_t * delta
        loss = objective(rows, z0, scale, z).sum()
        (delta.grad,) = torch.autograd.grad(loss, delta)
        optimizer.step()
    return (z0_t + scale_t * delta).detach().numpy()


def measures(rows, z0, scale, z, reference):
    z_t = torch.tensor(z, requires_grad=True)
    value = objective(rows, z0, scale, z_t)
    (grad,) = torch.autograd.grad(value.sum(), z_t)
    move = np.linalg.norm((reference - z0) / scale, axis=1)
    off = np.linalg.norm((z - reference) / scale, axis=1) / move
    return {
        "objective_mean": float(value.detach().mean()),
        "distance_to_reference_over_move_median": float(np.median(off)),
        "distance_to_reference_over_move_max": float(off.max()),
        "gradient_norm_median": float(
            np.median(np.linalg.norm(grad.numpy() * scale, axis=1))
        ),
        "_value": value.detach().numpy(),
    }


def run(pool, seed, args, log):
    data = eq.load_pool(pool, seed)
    split = routing.Split(data, seed)
    train = split.training_rows(256)
    router = eq.fit_locus(data, seed, "baseline", train)
    embedder = router.embedder_
    module = embedder.net_.module_.eval()
    table = check_evals(train)
    X_query = embedder._encode(table.queries)
    z0 = embedder._encoder_embeddings(table, X_query)
    scale = embedder.embedding_scale_

    def timed(fn):
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start

    rows = problem(module, table, X_query)
    reference, _ = timed(lambda: adam(rows, z0, scale, 2000, 0.01))
    solvers = {
        "adam 200 x 0.05 (session 28)": lambda: adam(rows, z0, scale, 200, 0.05),
    }
    for steps in (1, 2, 3, 5, 10):
        solvers[f"gauss-newton, at most {steps}"] = lambda s=steps: (
            _refinement.refine_embeddings(
                module, table, X_query, z0, scale=scale, steps=s, prior=PRIOR,
                batch_tokens=embedder._batch_tokens(),  # "auto" resolved
            )
        )  # fmt: skip
    ref_value = measures(rows, z0, scale, reference, reference)
    out = {"n_models": table.n_models, "rows": int(table.indptr[-1]), "solvers": {}}
    start = measures(rows, z0, scale, z0, reference)
    start.pop("_value")
    out["encoder"] = start
    for name, fn in solvers.items():
        z, seconds = timed(fn)
        m = measures(rows, z0, scale, z, reference)
        m["objective_above_reference_max"] = float(
            (m.pop("_value") - ref_value["_value"]).max()
        )
        m["seconds"] = seconds
        out["solvers"][name] = m
        log(
            f"{pool} seed {seed} {name:32s} {seconds:6.2f} s  objective "
            f"{m['objective_mean']:.6f}  off the optimum / move: median "
            f"{m['distance_to_reference_over_move_median']:.4f} max "
            f"{m['distance_to_reference_over_move_max']:.4f}"
        )
    return out


def priors_argument(default):
    """An ``add_arguments`` for :func:`command_line`: a ``--priors`` list of
    refinement prior weights, ``default`` when not given."""

    def add(parser):
        parser.add_argument("--priors", nargs="+", type=float, default=list(default))

    return add


def command_line(doc, stem, run, argv=None, add_arguments=None, header=None):
    """The command line of this script, ``refine_prior.py``,
    ``refine_fingerprints.py`` and ``top_k_routing.py``: ``--pools --seeds
    --threads --out --tag``, the embedding benchmark's quick settings, each
    (pool, seed) through ``run(pool, seed, args, log)``, and one JSON named
    ``stem[_tag].json`` with the run's date, commit (of the start), package
    changes and machine, plus ``header(args)``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--pools", nargs="+", default=["bfcl", "mmlu-open"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=os.path.join(eq.HERE, "results"))
    p.add_argument("--tag", default="", help=f"{stem}_TAG.json")
    if add_arguments is not None:
        add_arguments(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    eq.SETTINGS["max_epochs"] = 20  # embedding_quality.py --quick
    log = lambda *a: print(*a, flush=True)  # noqa: E731
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": git_commit(),  # the code of the start, as embedding_quality.py
        "dirty": git_dirty(),
        "machine": machine_info(torch_threads=args.threads),
        **(header(args) if header is not None else {}),
    }
    results["pools"] = {
        pool: {str(s): run(pool, s, args, log) for s in args.seeds}
        for pool in args.pools
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(
        args.out, f"{stem}_{args.tag}.json" if args.tag else f"{stem}.json"
    )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    log(f"wrote {path}")


def main(argv=None):
    command_line(__doc__, "refine_solver", run, argv, header=lambda _: {"prior": PRIOR})


if __name__ == "__main__":
    main()
