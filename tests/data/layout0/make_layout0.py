"""Write the layout-0 files that tests/test_file_versions.py loads.

Files of the first versions, before locus_sklearn's own attention (commit
8bc94dc) replaced torch's ``nn.MultiheadAttention`` and before files recorded
a network layout: a tiny LocusRouter and its LocusEmbedder. Run with the old
code on the path, from the repository root, for each commit (68285a4 wrote
every file here, b94499c the ``router_b94499c`` one)::

    mkdir -p /tmp/old && git archive 68285a4 locus_sklearn | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/layout0/make_layout0.py 68285a4
"""

import os
import sys
import warnings

import numpy as np
import pandas as pd
import torch

from locus_sklearn import LocusEmbedder, LocusRouter


def main(tag):
    """Fit and save the router and embedder of commit ``tag``."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    here = os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(0)
    queries = [f"q{j}" for j in range(12)]
    evals = pd.DataFrame(
        [(f"m{i}", q, float(rng.random() < 0.5)) for i in range(3) for q in queries],
        columns=["model", "query", "score"],
    )
    mapping = {q: rng.standard_normal(4).astype(np.float32) for q in queries}
    # As small as the old code fits, to keep the files small.
    embedder = LocusEmbedder(
        mapping,
        embedding_dim=4,
        n_latents=2,
        n_blocks=1,
        n_heads=1,
        hidden_dim=4,
        enc_size=(4, 8),
        dec_size=4,
        max_epochs=1,
        episodes_per_epoch=2,
        batch_size=2,
        random_state=0,
    )
    router = LocusRouter(embedder).fit(evals)
    router.save(os.path.join(here, f"router_{tag}.safetensors"))
    router.embedder_.save(os.path.join(here, f"embedder_{tag}.safetensors"))


# Not at import: pytest's --doctest-modules imports every module under tests/.
if __name__ == "__main__":
    main(sys.argv[1])
