"""A training prototype for embedding_quality.py: a ranking term across the
models of a training batch, at the queries their decoder sets share.

Routing reads P(correct) across models at one query: the argmax. The
correctness loss reads it per (model, query) pair, where most of what it
rewards is the query's difficulty and the model's overall strength, which
together explain most binary outcomes; a direction of z that only says which
of two equally strong models wins at a query moves that loss little. Sessions
4-24 changed what z is asked to keep (identity, profiles, variance) and left
the correctness loss alone. One change here: in training steps, wherever two
episodes of a batch have the same query in their decoder sets with different
scores, a logistic loss on the difference of their two logits, toward the
one that scored higher (Bradley-Terry across models; the query's difficulty
cancels in the difference). Ties carry no ranking and are left out. With
graded scores the target is ``(1 + y_a - y_b) / 2`` for ``y_a > y_b``.

The correctness loss and every forward pass are untouched; validation loss and
early stopping read the correctness loss alone. Settings fixed before any run
(not tuned): weight 1 (the correctness BCE is about 0.6 at the start, the
ranking term log 2 = 0.69), the mean over the batch's disagreeing pairs.

Session 26's first run found that term narrowing z: on these pools which of
two models wins at a query is mostly which is stronger. Its second variant,
``near=True`` (fixed before its run), weighs each pair by how alike the two
episodes' mean scores are, ``exp(-(s_a - s_b)^2 / (2 h^2))`` with h = 0.05
(each episode's mean over its encoder and decoder rows): among models of one
strength, who wins at a query is what they are good at, not how good.
"""

import torch
from _loss_terms import training_terms
from torch.nn import functional as F

WEIGHT = 1.0
BANDWIDTH = 0.05


def ranking_term(logits, target, query_id, strength=None, bandwidth=BANDWIDTH):
    """Mean logistic loss of ``logit_a - logit_b`` over every pair of
    episodes a != b whose decoder sets hold the same query with
    ``target_a > target_b``, toward ``(1 + target_a - target_b) / 2``.

    Parameters
    ----------
    logits, target : Tensor of shape (B, M)
        ``target`` NaN on padding.
    query_id : LongTensor of shape (B, M)
        The training query of each decoder position.
    strength : Tensor of shape (B,), default=None
        Each episode's mean score: the pairs are then weighed by
        ``exp(-(strength_a - strength_b)^2 / (2 bandwidth^2))``.
    bandwidth : float, default=BANDWIDTH

    Returns
    -------
    loss : scalar Tensor, or None when no pair disagrees
    n_pairs : int
    """
    valid = ~torch.isnan(target)
    episode = torch.arange(len(logits), device=logits.device)[:, None].expand_as(valid)
    ids, column = torch.unique(query_id[valid], return_inverse=True)
    where = (episode[valid], column)
    shape = (len(logits), len(ids))
    dense_logit = logits.new_zeros(shape).index_put(where, logits[valid])
    dense_target = target.new_zeros(shape).index_put(where, target[valid])
    answered = torch.zeros(shape, dtype=torch.bool, device=logits.device)
    answered[where] = True
    gap = dense_target[:, None, :] - dense_target[None, :, :]
    pair = answered[:, None, :] & answered[None, :, :] & (gap > 0)
    n_pairs = int(pair.sum())
    if n_pairs == 0:
        return None, 0
    margin = dense_logit[:, None, :] - dense_logit[None, :, :]
    losses = F.binary_cross_entropy_with_logits(
        margin[pair], (1 + gap[pair]) / 2, reduction="none"
    )
    if strength is None:
        return losses.mean(), n_pairs
    apart = strength[:, None] - strength[None, :]
    weight = torch.exp(-(apart**2) / (2 * bandwidth**2))[:, :, None].expand_as(pair)
    weight = weight[pair]
    return (weight * losses).sum() / weight.sum(), n_pairs


def episode_strength(X, target):
    """Each episode's mean score over its encoder and decoder rows, shape (B,)."""
    mask = X["enc_mask"].to(target.device)
    enc_score = X["enc_score"].to(target.device)
    valid = ~torch.isnan(target)
    total = (enc_score * mask).sum(dim=1) + torch.where(valid, target, 0.0).sum(dim=1)
    return total / (mask.sum(dim=1) + valid.sum(dim=1))


def model_ranking_training(weight=WEIGHT, record=None, near=False):
    """Within the block, LOCUS's training loss includes the ranking term
    (pairs weighed by their likeness in mean score with ``near``).

    ``record``: a list that gets, per training step, the term's value and the
    number of pairs it averaged.
    """

    def terms(net, y_pred, y_true, X):
        if X is None:
            return ()
        logits = y_pred[0]
        target = y_true.to(logits.device)
        query_id = X["dec_index"].to(logits.device)
        strength = episode_strength(X, target) if near else None
        term, n_pairs = ranking_term(logits, target, query_id, strength)
        if term is None:
            return ()
        if record is not None:
            record.append((float(term.detach()), n_pairs))
        return (weight * term,)

    return training_terms(terms)
