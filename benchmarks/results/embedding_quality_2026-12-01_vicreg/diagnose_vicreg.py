"""Are VICReg's terms met in training while the inference embeddings collapse?

BFCL, seed 0, 256 training rows per model, ``embedding_quality.py --quick``
settings; the baseline is fitted with the terms recorded but weighted 0. Per
fit: the terms and the participation ratio of each training batch's 16 model
embeddings (mean over the last 64 steps), against the same quantities for the
fitted router's embeddings of the 71 models (and of random 16-model batches).
Output: ``diagnose_vicreg.log`` next to this file.

Run from the repository root:
``python benchmarks/results/embedding_quality_2026-12-01_vicreg/diagnose_vicreg.py``
"""

import json
import os
import sys

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, BENCHMARKS)

import embedding_quality as eq  # noqa: E402
import numpy as np  # noqa: E402
import routing  # noqa: E402
import torch  # noqa: E402
from _vicreg import participation_ratio, variance_covariance, vicreg_training  # noqa: E402

torch.set_num_threads(1)
eq.SETTINGS["max_epochs"] = 20
data = eq.load_pool("bfcl")
split = routing.Split(data, 0)
train = split.training_rows(256)
for name, weights in [("baseline", (0.0, 0.0)), ("vicreg", (1.0, 0.04))]:
    record = []
    with vicreg_training(*weights, record=record):
        router = eq.fit_locus(data, 0, "baseline", train)
    last = np.array(record[-64:])
    Z = torch.as_tensor(router.model_embeddings_)
    variance, covariance = variance_covariance(Z)
    batches = [
        participation_ratio(Z[torch.randperm(len(Z), generator=g)[:16]])
        for g in (torch.Generator().manual_seed(i) for i in range(50))
    ]
    summary = {
        "train_last64_variance": float(last[:, 0].mean()),
        "train_last64_covariance": float(last[:, 1].mean()),
        "train_last64_batch_pr": float(last[:, 2].mean()),
        "eval_variance": float(variance),
        "eval_covariance": float(covariance),
        "eval_pr_all_models": participation_ratio(Z),
        "eval_pr_16_model_batches": float(np.mean(batches)),
        "n_steps": len(record),
    }
    print(name, json.dumps(summary), flush=True)
