"""A training prototype for embedding_quality.py: dropout of the kernel readout.

Issue 12 asks how the kernel readout interacts with the embedding ("it may let
z shrink to a bias"). Session 4 compared the readout with the embedding-only
predictor: without the readout the embedding is wider (participation ratio
1.73 against 1.30 on BFCL) but routing on MMLU-Pro is lower. Here the
readout stays, and one thing changes in training: for each training episode,
with probability ``P``, the readout's two features are those of a model with
no evaluation near the query (readout 0, i.e. a neutral 0.5, and evidence
0), so that on those episodes the predictor must read the model from z and
the query's encoding alone, as it does for queries far from a model's
evaluations. Validation, early stopping and prediction see the readout
always.

Setting fixed before any run (not tuned): ``P = 0.5``.
"""

import contextlib

import torch

from locus_sklearn import _readout

P = 0.5


@contextlib.contextmanager
def readout_dropout_training(p=P):
    """Within the block, training episodes lose their readout with probability p."""
    episodes = _readout.KernelReadout.episodes

    def dropped(self, features, query_index, set_index, set_score, set_mask):
        out = episodes(self, features, query_index, set_index, set_score, set_mask)
        if not self.training or p == 0:
            return out
        keep = torch.rand(out.shape[0], device=out.device) >= p  # one draw per episode
        return out * keep[:, None, None].to(out.dtype)

    _readout.KernelReadout.episodes = dropped
    try:
        yield
    finally:
        _readout.KernelReadout.episodes = episodes
