"""A training prototype for embedding_quality.py: each model's nearest
embeddings are the models whose answers are nearest, read against a queue
of recent episodes.

Session 36's agreement term (a metric-MDS stress, ``LocusEmbedder
(agreement_weight=...)``) raised Shaberi's sibling recall@1 from 0.10 to
0.15, under the raw score vectors' 0.36 and the score disagreement's 0.40
on the same rows. Two things in it may hold it there. It fits every
distance of a batch alike, where sibling retrieval asks only which models
are nearest; and it sees a pair only when both models are among one batch's
16 episodes (about one batch in nine for two of Shaberi's ~135 training
models), so a sibling is rarely there to be pulled near. Here one term is
added to training, a neighbour divergence (stochastic neighbour embedding):
for each episode i of a batch, over candidates j (the batch's other
episodes and the last ``QUEUE`` training episodes, their embeddings as
computed then and held fixed; never an episode of i's own model; only those
sharing at least ``MIN_SHARED`` training queries with i),

    P_ij ∝ exp(-(t_ij / mean_j t_ij) / T),  Q_ij ∝ exp(-(d_ij / mean_j d_ij) / T),

t_ij the root mean squared score difference over the queries both hold (as
in the agreement term), d_ij = |z_i - z_j|, and the term is the mean over
episodes with at least two candidates of KL(P_i || Q_i). Each side is
divided by its mean over i's candidates, so the term asks for an order of
neighbours, not a scale. Validation loss and early stopping read the
correctness loss alone.

Settings fixed before any run (not tuned): weight 0.3 (the agreement term's
accepted weight), temperature T = 0.1 (a neighbour at 0.8 of the mean
disagreement weighs e^2 times one at the mean), ``QUEUE = 256`` episodes
(about two passes over a pool of 135 models), ``MIN_SHARED = 8``.
"""

import contextlib

import torch
from _loss_terms import patched, training_terms

from locus_sklearn import _training
from locus_sklearn._agreement import MIN_SHARED, episode_scores

WEIGHT = 0.3
TEMPERATURE = 0.1
QUEUE = 256


def cross_disagreement(held_a, scores_a, held_b, scores_b):
    """Root mean squared score difference of every row of ``a`` against
    every row of ``b`` over the columns both hold, and the number of such
    columns: two (A, B) tensors (``rms`` 0 where nothing is shared).

    Parameters
    ----------
    held_a, scores_a : Tensor of shape (A, Q)
    held_b, scores_b : Tensor of shape (B, Q)
        As :func:`locus_sklearn._agreement.episode_scores` returns.
    """
    shared = held_a @ held_b.T
    sq_diff = (
        (scores_a * scores_a) @ held_b.T
        + held_a @ (scores_b * scores_b).T
        - 2 * scores_a @ scores_b.T
    )
    return torch.sqrt((sq_diff / shared.clamp(min=1)).clamp(min=0)), shared


def neighbour_divergence(z, candidates, target, valid, temperature=TEMPERATURE):
    """Mean over rows of ``z`` with at least two valid candidates of
    KL(P_i || Q_i) (see the module docstring).

    Parameters
    ----------
    z : Tensor of shape (B, d)
    candidates : Tensor of shape (C, d)
    target : Tensor of shape (B, C)
        The score disagreement t_ij.
    valid : BoolTensor of shape (B, C)
    temperature : float

    Returns
    -------
    Tensor, scalar
        0 (with a gradient of zeros) when no row has two candidates.
    """
    rows = valid.sum(1) >= 2
    if not rows.any():
        return z.sum() * 0
    z, target, valid = z[rows], target[rows], valid[rows]
    diff = z.unsqueeze(1) - candidates.unsqueeze(0)
    # The epsilon keeps the square root's gradient finite for identical rows.
    d = torch.sqrt((diff * diff).sum(-1) + 1e-12)
    count = valid.sum(1, keepdim=True)

    def log_softmax(distance):
        mean = torch.where(valid, distance, 0).sum(1, keepdim=True) / count
        logits = -distance / (mean.clamp(min=1e-12) * temperature)
        return torch.log_softmax(logits.masked_fill(~valid, float("-inf")), dim=1)

    log_p, log_q = log_softmax(target), log_softmax(d)
    p = log_p.exp()
    kl = torch.where(valid, p * (log_p - log_q), 0).sum(1)
    return kl.mean()


def _with_models(call):
    """EpisodeCollator.__call__ that also returns each episode's model index
    as ``X["model"]`` (B,) (the network reads named keys only)."""

    def collate(self, batch):
        X, y = call(self, batch)
        X["model"] = torch.as_tensor([int(m) for _, m in batch])
        return X, y

    return collate


@contextlib.contextmanager
def neighbour_geometry_training(
    weight=WEIGHT, temperature=TEMPERATURE, queue=QUEUE, min_shared=MIN_SHARED,
    record=None,
):  # fmt: skip
    """Within the block, LOCUS's training loss includes the neighbour term.
    One queue per block: one fit.

    ``record``: a list that gets, per training step, the term's value and
    the mean number of candidates per episode (a diagnostic).
    """
    state = {}

    def terms(net, y_pred, y_true, X):
        z = y_pred[1]
        held, scores = episode_scores(X, y_true, len(net.query_bank_))
        models = X["model"].to(z.device)
        past = state.get("queue")
        cand_z, cand_held, cand_scores, cand_models = z, held, scores, models
        if past is not None:
            cand_z = torch.cat([z, past[0]])
            cand_held = torch.cat([held, past[1]])
            cand_scores = torch.cat([scores, past[2]])
            cand_models = torch.cat([models, past[3]])
        target, shared = cross_disagreement(held, scores, cand_held, cand_scores)
        valid = (models.unsqueeze(1) != cand_models.unsqueeze(0)) & (
            shared >= min_shared
        )
        value = neighbour_divergence(
            z.float(), cand_z.float(), target, valid, temperature
        )
        new = (z.detach(), held, scores, models)
        if past is not None:
            new = tuple(
                torch.cat([a, b])[:queue] for a, b in zip(new, past, strict=True)
            )
        state["queue"] = new
        if record is not None:
            record.append((float(value.detach()), float(valid.sum(1).float().mean())))
        return (weight * value,)

    call = _training.EpisodeCollator.__call__
    with (
        training_terms(terms),
        patched((_training.EpisodeCollator, "__call__", _with_models(call))),
    ):
        yield
