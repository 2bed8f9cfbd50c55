"""Is the identity term learned in training, and does it carry to inference?

BFCL, seed 0, 256 training rows per model, ``embedding_quality.py --quick``
settings; the baseline is fitted with the term recorded but weighted 0. Per
fit: the InfoNCE of the halves and their self-identification within each
training batch (16 episodes; mean of the first and last 64 steps; chance
1/16), against the fitted network's self-identification at inference from two
disjoint random 96-row halves of each model's training rows (the size of a
training half at the median encoder set), among random 16-model batches and
among all 71 models (centred cosine).
Output: ``diagnose_identity.log`` next to this file.

Run from the repository root:
``python benchmarks/results/embedding_quality_2026-12-01_identity/diagnose_identity.py``
"""

import json
import os
import sys

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, BENCHMARKS)

import embedding_quality as eq  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import routing  # noqa: E402
import torch  # noqa: E402
from _identity import identity_top1, identity_training  # noqa: E402

torch.set_num_threads(1)
eq.SETTINGS["max_epochs"] = 20
data = eq.load_pool("bfcl")
split = routing.Split(data, 0)
train = split.training_rows(256)
rng = np.random.default_rng(0)
models = sorted(train["model"].unique())
halves = []
for m in models:
    rows = train[train["model"] == m].sample(
        frac=1.0, random_state=rng.integers(1 << 31)
    )
    halves.append((rows.iloc[:96], rows.iloc[96:192]))
for name, weight in [("baseline", 0.0), ("identity", 1.0)]:
    record = []
    with identity_training(weight=weight, record=record):
        router = eq.fit_locus(data, 0, "baseline", train)
    embedder = router.embedder_
    z_a = torch.as_tensor(embedder.transform(pd.concat([h[0] for h in halves])))
    z_b = torch.as_tensor(embedder.transform(pd.concat([h[1] for h in halves])))
    batches = [
        float(identity_top1(z_a[idx], z_b[idx]))
        for idx in (
            torch.randperm(len(models), generator=torch.Generator().manual_seed(i))[:16]
            for i in range(200)
        )
    ]
    rec = np.array(record)
    summary = {
        "n_steps": len(record),
        "train_first64_nce": float(rec[:64, 0].mean()),
        "train_last64_nce": float(rec[-64:, 0].mean()),
        "train_first64_top1_of_16": float(rec[:64, 1].mean()),
        "train_last64_top1_of_16": float(rec[-64:, 1].mean()),
        "eval_top1_16_model_batches": float(np.mean(batches)),
        "eval_top1_all_models": float(identity_top1(z_a, z_b)),
        "n_models": len(models),
    }
    print(name, json.dumps(summary), flush=True)
