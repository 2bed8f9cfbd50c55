"""Write the fixed-seed reference that tests/test_reference.py compares against.

Run once from the repository root with the code whose outputs are the reference
(it was run on commit fd95f1c, before the training code moved into one home,
again when training's CPU dropout masks moved to bulk draws (``_dropout.py``):
the same law from another random stream, so every fitted weight changed, and
again when a training step's arithmetic was regrouped for speed, which moved
fitted weights by float rounding, and again on 2026-12-04 for the same reason):

    python tests/data/reference/make_reference.py

It fits a tiny LocusRouter with each predictor on a synthetic pool, then stores
the model embeddings, P(correct) on every query, the routed models and every
tensor of the saved router file. ``--out DIR`` writes the same outputs to DIR
instead (with the embedder's ``embedding_scale``, which the test checks against
the saved pool embeddings rather than a recorded value): what the test runs.

The fits run with one torch thread and with PyTorch's and oneDNN's CPU kernels
held to AVX2 (``PINNED_ISA``; run as a script, it restarts itself with them
set, since they are read when torch loads). A CPU with AVX-512 otherwise takes
other kernels whose sums round differently: on such a machine (2026-12-04) the
unpinned fit's attention key biases differed from the reference by 1e-5 and the
pinned one matched it bit for bit. The reference was recorded on AVX2-only
machines, where the pins change nothing.

The pins do not make Intel's and AMD's processors round alike: MKL, torch's
BLAS, takes vendor-specific code paths, and on an Intel Xeon (2026-12-06) every
fitted weight differed from the AMD reference by about one float32 rounding
(the attention key biases by 1e-5; the same routed models). So the reference
is recorded per CPU vendor, in a folder named by :func:`cpu_vendor`
(``AuthenticAMD/``: the reference of every recording above; ``GenuineIntel/``:
recorded 2026-12-06 from the same code, whose AMD outputs still matched bit
for bit), and the test reads the folder of the CPU it runs on.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_vendor():
    """The CPU's vendor id (``GenuineIntel``, ``AuthenticAMD``), as Linux's
    ``/proc/cpuinfo`` names it; ``"unknown"`` where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return "unknown"


sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))

# The instruction set every reference fit runs with; read by torch at import.
PINNED_ISA = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}

if __name__ == "__main__" and any(
    os.environ.get(k) != v for k, v in PINNED_ISA.items()
):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **PINNED_ISA})

import torch  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.datasets import make_model_pool  # noqa: E402

# The settings of the reference fits, shared with tests/test_reference.py.
POOL = dict(n_models=6, n_queries=200, evals_per_model=100, random_state=0)
TINY = dict(
    embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2, max_epochs=3,
    episodes_per_epoch=24, batch_size=4, random_state=0,
)  # fmt: skip


def reference_outputs(kernel_readout, tmp_path):
    """Outputs of one fixed-seed fit: a dict of arrays."""
    pool = make_model_pool(**POOL)
    embedder = LocusEmbedder(pool.encodings, kernel_readout=kernel_readout, **TINY)
    # The plain router: the reference predates the shrinkage safeguard.
    router = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
    queries = pool.evals["query"].unique()
    out = {
        "embeddings": router.model_embeddings_,
        "transform": router.embedder_.transform(pool.evals),
        "proba": router.predict_proba(queries),
        "routed": router.predict(queries).astype(str),
    }
    path = os.path.join(tmp_path, "router.safetensors")
    router.save(path)
    from safetensors.numpy import load_file

    for name, value in load_file(path).items():
        out[f"file.{name}"] = value
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        help="write every output, the embedding scale included, to this folder "
        "(default: record the reference, without the scale, in the folder of "
        "this CPU's vendor beside this script)",
    )
    args = parser.parse_args(argv)
    import tempfile

    torch.set_num_threads(1)
    for readout in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            arrays = reference_outputs(readout, tmp)
        if args.out is None:
            # Checked against the saved pool embeddings' spread, not recorded
            # (tests/test_reference.py).
            arrays.pop("file.embedding_scale")
        name = "readout" if readout else "embedding_only"
        folder = args.out or os.path.join(HERE, cpu_vendor())
        os.makedirs(folder, exist_ok=True)
        np.savez_compressed(os.path.join(folder, f"{name}.npz"), **arrays)
        print(name, {k: v.shape for k, v in arrays.items()})


if __name__ == "__main__":
    main()
