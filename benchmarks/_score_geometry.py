"""A training prototype for embedding_quality.py: model embeddings whose
distances follow the models' score disagreement on shared queries.

Sessions 18-24 located what finds Shaberi's siblings and separates
same-strength specialists: query-level agreement (raw score vectors on the
training queries 0.36 recall@1, the library's score disagreement 0.40, LOCUS's
z 0.10). The terms tried so far rewarded either one model's two views being
near each other (identity InfoNCE, sessions 12 and 23), a spread of z
(VICReg, session 11) or an order of strengths (session 26); none asks two
*different* models to be as near as their answers are alike. Here one thing
changes in training: a stress term (metric multidimensional scaling) on each
batch's episodes. For episodes i and j of a batch, the target is their root
mean squared score difference over the training queries both episodes hold
(encoder and decoder rows, with their answers):

    t_ij = sqrt(mean over shared q of (y_iq - y_jq)^2)

(for 0/1 scores, the square root of the share of shared queries on which they
disagree), and the term is the weighted mean of
``(d_ij / mean d - t_ij / mean t)^2`` over pairs with at least ``MIN_SHARED``
shared queries, weighted by the number shared, where d_ij = |z_i - z_j|.
Both distances are divided by their weighted batch mean, so the term fixes
the *shape* of the batch's embeddings, not their scale or position: the
correctness loss keeps both. Validation loss and early stopping read the
correctness loss alone.

Settings fixed before any run (not tuned): weight 1 (the correctness BCE is
about 0.6 at the start, the stress about 0.1-0.5), ``MIN_SHARED = 8``.
"""

import torch
from _loss_terms import training_terms

# The package's term (LocusEmbedder(agreement_weight=...)) since the second
# run; the prototype kept its own copy until then, with the same figures per
# seed to the last digit.
from locus_sklearn._agreement import (
    MIN_SHARED,
    episode_scores,
    rms_disagreement,
    stress,
)

WEIGHT = 1.0


def correlation_distance(held, scores, eps=1e-6):
    """``sqrt(1 - r_ij)``, r the Pearson correlation of rows i and j over the
    columns both hold (0 where either is constant there), and the number of
    such columns: two (B, B) tensors.

    Session 36's fourth run: on 0/1 scores the squared difference of two
    models that answer independently is ``p_i (1 - p_j) + p_j (1 - p_i)``,
    set by their accuracies, so the RMS target mostly restates strength. The
    correlation removes each model's mean and spread on the shared queries;
    ``sqrt(1 - r)`` is proportional to the distance of the standardised
    score vectors. (It narrowed the planted specialists' embedding as much
    as the RMS target: the strength in that target was not the cause;
    TUNING.md session 36.)
    """
    shared = held @ held.T
    n = shared.clamp(min=1)
    sum_i = scores @ held.T  # row i's scores over the columns j holds
    sq_i = (scores * scores) @ held.T
    mean_i, mean_j = sum_i / n, sum_i.T / n
    var_i = (sq_i / n - mean_i * mean_i).clamp(min=0)
    var_j = (sq_i.T / n - mean_j * mean_j).clamp(min=0)
    cov = (scores @ scores.T) / n - mean_i * mean_j
    ok = (var_i > eps) & (var_j > eps)
    r = torch.where(ok, cov / torch.sqrt(var_i * var_j).clamp(min=eps), 0.0)
    return torch.sqrt((1 - r.clamp(-1, 1)).clamp(min=0)), shared


TARGETS = {"rms": rms_disagreement, "correlation": correlation_distance}


def score_geometry_training(
    weight=WEIGHT, min_shared=MIN_SHARED, record=None, target="rms"
):
    """Within the block, LOCUS's training loss includes the stress term.

    ``target``: "rms" (:func:`rms_disagreement`) or "correlation"
    (:func:`correlation_distance`).

    ``record``: a list that gets, per training step, the term's value and
    its number of weighted pairs (a diagnostic).
    """

    def terms(net, y_pred, y_true, X):
        z = y_pred[1]
        if z.shape[0] < 2:
            return ()
        n_queries = len(net.query_bank_)
        held, scores = episode_scores(X, y_true, n_queries)
        distance, shared = TARGETS[target](held, scores)
        pair_weight = torch.where(shared >= min_shared, shared, 0.0)
        value = stress(z.float(), distance, pair_weight)
        if record is not None:
            pairs = int((torch.triu(pair_weight, 1) > 0).sum())
            record.append((float(value.detach()), pairs))
        return (weight * value,)

    return training_terms(terms)
