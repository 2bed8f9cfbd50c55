"""The agreement term of training: model embeddings as far apart as the
models' answers differ.

The correctness loss alone lets the embedding keep little beyond strength:
two models of one strength that answer different queries right may end up
next to each other, and two variants of one model that answer the same
queries the same way far apart. The term is a metric multidimensional-scaling
stress on each training batch: for the episodes i, j of the batch, the target
is the root mean squared score difference over the training queries both
hold (encoder and decoder rows, with their answers),

    t_ij = sqrt(mean over shared q of (y_iq - y_jq)^2),

and the term is the weighted mean over pairs sharing at least
:data:`MIN_SHARED` queries (weight: the number shared) of
``(d_ij / mean d - t_ij / mean t)^2``, where ``d_ij = |z_i - z_j|``. Both are
divided by their weighted batch mean, so the term shapes the batch's
embeddings and leaves their scale and position to the correctness loss.
On 0/1 scores ``t_ij^2`` is the share of shared queries on which the two
models disagree.
"""

import torch

__all__ = [
    "MIN_SHARED",
    "agreement_stress",
    "episode_scores",
    "rms_disagreement",
    "stress",
]

#: Pairs of episodes sharing fewer training queries have too noisy a
#: disagreement to be a target (fixed before the benchmark run that chose
#: the term, benchmarks/results/TUNING.md session 36; not tuned).
MIN_SHARED = 8


def episode_scores(X, y_true, n_queries):
    """Each episode's scores as a dense row over the training queries.

    Parameters
    ----------
    X : dict of Tensor
        A collated training batch: ``enc_index``, ``enc_score``, ``enc_mask``
        of shape (B, N) and ``dec_index`` of shape (B, M), indices into the
        ``n_queries`` training queries.
    y_true : Tensor of shape (B, M)
        Decoder scores, NaN on padding.
    n_queries : int

    Returns
    -------
    held, scores : Tensor of shape (B, n_queries)
        1 where the episode holds the query (an encoder or decoder row), and
        its score there (0 elsewhere). A query held in both sets (``disjoint=
        False``) counts once, with the mean of its rows' scores.

    Examples
    --------
    >>> import torch
    >>> X = {"enc_index": torch.tensor([[0, 1]]), "enc_score": torch.tensor([[1., 0.]]),
    ...      "enc_mask": torch.tensor([[True, True]]), "dec_index": torch.tensor([[2, 0]])}
    >>> held, scores = episode_scores(X, torch.tensor([[1., float("nan")]]), 4)
    >>> held.tolist(), scores.tolist()
    ([[1.0, 1.0, 1.0, 0.0]], [[1.0, 0.0, 1.0, 0.0]])
    """
    index = torch.cat([X["enc_index"], X["dec_index"]], dim=1)
    held = torch.cat([X["enc_mask"], ~torch.isnan(y_true)], dim=1).float()
    score = torch.cat([X["enc_score"], torch.nan_to_num(y_true)], dim=1).float()
    # scatter_add, not scatter: padding positions point at query 0 with weight
    # 0 and must not overwrite a real row of that query.
    count = held.new_zeros(len(index), n_queries).scatter_add_(1, index, held)
    total = held.new_zeros(len(index), n_queries).scatter_add_(1, index, score * held)
    # Without disjoint sets a query can be both an encoder and a decoder row
    # of one episode: it is still one query the episode holds (counted twice,
    # it would weigh double and its summed score could exceed 1).
    return (count > 0).to(held.dtype), total / count.clamp(min=1)


def rms_disagreement(held, scores):
    """Root mean squared score difference of every pair of rows over the
    columns both hold, and the number of such columns.

    Parameters
    ----------
    held, scores : Tensor of shape (B, Q)
        As returned by :func:`episode_scores`.

    Returns
    -------
    rms, shared : Tensor of shape (B, B)
        ``rms`` is 0 where nothing is shared. Computed in the dtype of
        ``held`` and ``scores`` even under a caller's ``torch.autocast``.

    Examples
    --------
    >>> import torch
    >>> held = torch.tensor([[1., 1., 0.], [1., 1., 1.]])
    >>> scores = torch.tensor([[1., 0., 0.], [0., 0., 1.]])
    >>> rms, shared = rms_disagreement(held, scores)
    >>> round(float(rms[0, 1]) ** 2, 6), float(shared[0, 1])
    (0.5, 2.0)
    """
    # Imported here: _training imports this module.
    from ._training import full_precision

    # These are data, not learned values: autocast's bfloat16 would round a
    # count of 1,001 shared queries to 1,000 and, through the cancellation
    # below, read a disagreement of 12 in 1,200 (t^2 = 0.01) as 0.0067.
    with full_precision(held.device.type):
        shared = held @ held.T
        squares = (scores * scores) @ held.T
        sq_diff = squares + squares.T - 2 * scores @ scores.T
        return torch.sqrt((sq_diff / shared.clamp(min=1)).clamp(min=0)), shared


def stress(z, target, weight):
    """Weighted mean of ``(d / mean d - t / mean t)^2`` over the pairs
    i < j of positive weight.

    Parameters
    ----------
    z : Tensor of shape (B, d)
        d is the euclidean distance of its rows.
    target, weight : Tensor of shape (B, B)

    Returns
    -------
    Tensor, scalar
        0 (with a gradient of zeros) when no pair has weight or every target
        is 0.

    Examples
    --------
    >>> import torch
    >>> z = torch.tensor([[0.], [1.], [3.]])
    >>> target = torch.tensor([[0., 1., 3.], [1., 0., 2.], [3., 2., 0.]])
    >>> float(stress(z, target, torch.ones(3, 3)))  # the same shape: 0
    0.0
    """
    b = len(z)
    upper = torch.ones(b, b, dtype=torch.bool, device=z.device).triu(diagonal=1)
    w = torch.where(upper, weight, 0)
    total = w.sum()
    if total <= 0:
        return z.sum() * 0
    t_mean = (w * target).sum() / total
    if t_mean <= 0:
        return z.sum() * 0
    diff = z.unsqueeze(0) - z.unsqueeze(1)
    # The epsilon keeps the square root's gradient finite on the diagonal
    # (weight 0 there) and for two identical embeddings.
    d = torch.sqrt((diff * diff).sum(-1) + 1e-12)
    d_mean = (w * d).sum() / total
    return (w * (d / d_mean - target / t_mean) ** 2).sum() / total


def agreement_stress(z, X, y_true, n_queries, min_shared=MIN_SHARED):
    """The agreement term of one training batch (see the module docstring).

    Parameters
    ----------
    z : Tensor of shape (B, d)
        The episodes' embeddings.
    X : dict of Tensor
        The collated batch (:func:`episode_scores`).
    y_true : Tensor of shape (B, M)
    n_queries : int
        Number of training queries the batch indexes.
    min_shared : int, default=MIN_SHARED

    Returns
    -------
    Tensor, scalar
    """
    X = {
        k: X[k].to(z.device)
        for k in ("enc_index", "enc_score", "enc_mask", "dec_index")
    }
    # The targets are data: no gradient to record.
    with torch.no_grad():
        held, scores = episode_scores(X, y_true.to(z.device), n_queries)
        target, shared = rms_disagreement(held, scores)
    weight = torch.where(shared >= min_shared, shared, 0)
    return stress(z.float(), target, weight)
