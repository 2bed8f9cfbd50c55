"""A training prototype for embedding_quality.py: VICReg's variance and
covariance terms on the model embeddings of each training batch.

Issue 12 lists "variance/covariance regularisation of z across models" among
the ways to keep the embedding off one axis. VICReg (Bardes, Ponce and LeCun,
2022) keeps each coordinate's standard deviation across the batch at least
``gamma`` (a hinge) and pushes the off-diagonal covariances to zero, so that
the embeddings spread over many directions. Here the batch is the training
step's episodes (one model each), and the terms are added to LOCUS's
correctness loss in training steps only (validation loss and early stopping
read the correctness loss alone). Nothing in the package changes: the
prototype swaps ``LocusNet.get_loss`` for the duration of one fit.

Weights fixed before any run (not tuned): VICReg's own ratio of variance to
covariance weight, 25 : 1, with the variance weight at 1 (the correctness
BCE is about 0.6 at the start), gamma = 1, eps = 1e-4 as in the paper.
"""

import torch
from _loss_terms import training_terms

VARIANCE_WEIGHT = 1.0
COVARIANCE_WEIGHT = 0.04
GAMMA = 1.0
EPS = 1e-4


def variance_covariance(z, gamma=GAMMA, eps=EPS):
    """VICReg's variance hinge and covariance penalty of a batch ``z`` (B, d).

    Returns
    -------
    variance : Tensor, scalar
        Mean over coordinates of ``relu(gamma - sqrt(var + eps))``.
    covariance : Tensor, scalar
        Sum of squared off-diagonal covariances, divided by d.
    """
    n, d = z.shape
    centred = z - z.mean(dim=0)
    std = torch.sqrt(centred.var(dim=0) + eps)
    variance = torch.relu(gamma - std).mean()
    cov = centred.T @ centred / (n - 1)
    off = cov - torch.diag(torch.diagonal(cov))
    return variance, off.pow(2).sum() / d


def participation_ratio(z):
    """(Σσ²)² / Σσ⁴ over the singular values of the centred rows of ``z``."""
    lam = torch.linalg.svdvals(z - z.mean(dim=0)) ** 2
    return float(lam.sum() ** 2 / (lam**2).sum()) if lam.sum() > 0 else 0.0


def vicreg_training(
    variance_weight=VARIANCE_WEIGHT, covariance_weight=COVARIANCE_WEIGHT, record=None
):
    """Within the block, LOCUS's training loss includes the VICReg terms.

    ``record``: a list that gets, per training step, the two terms and the
    participation ratio of that batch's embeddings (a diagnostic).
    """

    def terms(net, y_pred, y_true, X):
        z = y_pred[1]
        if z.shape[0] < 2:
            return ()
        variance, covariance = variance_covariance(z)
        if record is not None:
            pr = participation_ratio(z.detach().float())
            record.append((float(variance.detach()), float(covariance.detach()), pr))
        return variance_weight * variance, covariance_weight * covariance

    return training_terms(terms)
