"""Episodes for training LOCUS through skorch: datasets, collation, callbacks.

An *episode* is one model's training item: an encoder set S_enc of its scored
evaluations (to build z_m) and a decoder set S_dec of its other evaluations
(to predict). Datasets yield per-model index arrays; :func:`collate_episodes`
pads them into one batch and gathers the batch's unique query encodings once.
"""

import numpy as np
import torch
from skorch.callbacks import Callback

from .metrics._routing import routing_accuracy

__all__ = [
    "collate_episodes",
    "DivergenceCheck",
    "EpisodeCollator",
    "FixedEpisodes",
    "RandomEpisodes",
    "ValidRoutingAccuracy",
    "split_rows_by_query",
]


def split_rows_by_query(table, validation_fraction, rng):
    """Hold out a fraction of queries: their rows become validation targets.

    A model keeps at least two training rows (one to encode, one to decode);
    held-out rows that would leave it fewer stay in training.

    Returns
    -------
    is_valid : ndarray of bool, shape (n_rows,)
    """
    if validation_fraction <= 0:
        return np.zeros(table.n_rows, dtype=bool)
    n_valid = int(round(validation_fraction * table.n_queries))
    held_out = np.zeros(table.n_queries, dtype=bool)
    held_out[rng.choice(table.n_queries, size=n_valid, replace=False)] = True
    is_valid = held_out[table.query_index]
    indptr = table.indptr
    for m in range(table.n_models):
        rows = slice(indptr[m], indptr[m + 1])
        if (~is_valid[rows]).sum() < 2:
            is_valid[rows] = False
    return is_valid


def _per_model(table, rows_mask):
    """Lists of (query_index, score) arrays per model for the masked rows."""
    queries, scores = [], []
    indptr = table.indptr
    for m in range(table.n_models):
        rows = np.arange(indptr[m], indptr[m + 1])
        rows = rows[rows_mask[rows]]
        queries.append(torch.as_tensor(table.query_index[rows]))
        scores.append(torch.as_tensor(table.score[rows]))
    return queries, scores


class RandomEpisodes(torch.utils.data.Dataset):
    """Training episodes: each item is one model's rows in a random order.

    :class:`EpisodeCollator` then splits each item into S_enc and S_dec, with
    one S_enc size per batch. Randomness comes from torch's global generator,
    seeded by the estimator.

    With probability ``mix_prob`` an item is a *mixed model* instead: the
    model's rows in a random half of the query regions (``query_region``)
    and a random partner model's rows in the other half. A pool of tens of
    models gives the encoder only tens of distinct sets to learn from; mixed
    models add sets whose skill differs by region, as real models' do.

    Parameters
    ----------
    queries, scores : list of Tensor
        Per-model training rows.
    models : ndarray of int
        Model index of each item (an epoch walks every model, possibly
        several times).
    mix_prob : float, default=0.0
    query_region : LongTensor of shape (n_queries,), default=None
        Region (e.g. k-means cluster of the encodings) of every query; needed
        when ``mix_prob > 0``.
    """

    def __init__(self, queries, scores, models, mix_prob=0.0, query_region=None):
        self.queries = queries
        self.scores = scores
        self.models = models
        self.mix_prob = mix_prob
        self.query_region = query_region

    def __len__(self):
        return len(self.models)

    def _rows(self, m):
        q, y = self.queries[m], self.scores[m]
        n_models = len(self.queries)
        if self.mix_prob == 0 or n_models < 2 or torch.rand(()).item() >= self.mix_prob:
            return q, y
        partner = int(torch.randint(n_models - 1, ()).item())
        partner += partner >= m
        n_regions = int(self.query_region.max()) + 1
        from_partner = torch.rand(n_regions) < 0.5
        keep = ~from_partner[self.query_region[q]]
        qp, yp = self.queries[partner], self.scores[partner]
        take = from_partner[self.query_region[qp]]
        q_mix = torch.cat([q[keep], qp[take]])
        if len(q_mix) < 2:
            return q, y
        return q_mix, torch.cat([y[keep], yp[take]])

    def __getitem__(self, i):
        m = int(self.models[i])
        q, y = self._rows(m)
        order = torch.randperm(len(q))
        return (q[order], y[order]), m


class EpisodeCollator:
    """Split shuffled rows (:class:`RandomEpisodes`) into S_enc and S_dec and
    pad the batch (:func:`collate_episodes`).

    One size |S_enc| is drawn log-uniformly from ``enc_size`` per *batch*
    (each episode capped so at least a quarter of its model's rows remain
    for S_dec): every episode of a batch then has the same length, so no
    compute goes to padding. Each episode's size still has the log-uniform
    law. S_dec holds up to ``dec_size`` rows, disjoint from S_enc when
    ``disjoint``.

    Parameters
    ----------
    enc_size : tuple of (int, int)
    dec_size : int
    disjoint : bool
    """

    def __init__(self, enc_size, dec_size, disjoint):
        self.enc_size = tuple(enc_size)
        self.dec_size = dec_size
        self.disjoint = disjoint

    def __call__(self, batch):
        low, high = np.log(self.enc_size[0]), np.log(self.enc_size[1])
        u = torch.rand(()).item()
        drawn = int(round(np.exp(low + u * (high - low))))
        episodes = []
        for (q, y), m in batch:
            n = len(q)
            n_enc = max(1, min(drawn, n - max(1, n // 4)))
            if self.disjoint:
                dec = slice(n_enc, n_enc + self.dec_size)
            else:
                dec = torch.randperm(n)[: self.dec_size]
            episodes.append(((q[:n_enc], y[:n_enc], q[dec], y[dec]), m))
        return collate_episodes(episodes)


class FixedEpisodes(torch.utils.data.Dataset):
    """Deterministic episodes: S_enc = a model's encoder rows (capped at
    ``max_enc`` by a fixed subsample), S_dec = its held-out rows."""

    def __init__(self, enc_queries, enc_scores, dec_queries, dec_scores, rng, max_enc):
        self.items = []
        for m, (qe, ye, qd, yd) in enumerate(
            zip(enc_queries, enc_scores, dec_queries, dec_scores, strict=True)
        ):
            if len(qd) == 0 or len(qe) == 0:
                continue
            if len(qe) > max_enc:
                keep = torch.as_tensor(
                    np.sort(rng.choice(len(qe), max_enc, replace=False))
                )
                qe, ye = qe[keep], ye[keep]
            self.items.append(((qe, ye, qd, yd), m))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate_episodes(batch):
    """Pad a list of episodes into one batch for :class:`~._nn.LocusNetwork`.

    Returns ``(X, y)``: ``X`` a dict of ``enc_index``, ``enc_score``,
    ``enc_mask`` (B, N) and ``dec_index`` (B, M), indices into the network's
    query bank; ``y`` (B, M) with NaN on padding.
    """
    episodes = [item[0] for item in batch]
    n_enc = max(len(e[0]) for e in episodes)
    n_dec = max(len(e[2]) for e in episodes)
    b = len(episodes)
    enc_index = torch.zeros(b, n_enc, dtype=torch.long)
    enc_score = torch.zeros(b, n_enc)
    enc_mask = torch.zeros(b, n_enc, dtype=torch.bool)
    dec_index = torch.zeros(b, n_dec, dtype=torch.long)
    target = torch.full((b, n_dec), float("nan"))
    for i, (qe, ye, qd, yd) in enumerate(episodes):
        enc_index[i, : len(qe)] = qe
        enc_score[i, : len(qe)] = ye
        enc_mask[i, : len(qe)] = True
        dec_index[i, : len(qd)] = qd
        target[i, : len(qd)] = yd
    X = {
        "enc_index": enc_index,
        "enc_score": enc_score,
        "enc_mask": enc_mask,
        "dec_index": dec_index,
    }
    return X, target


class DivergenceCheck(Callback):
    """Stop with a clear error as soon as a training loss is not finite,
    instead of training on NaN and failing later somewhere less clear."""

    def on_batch_end(self, net, batch=None, training=None, **kwargs):
        if not training:
            return
        loss = net.history[-1, "batches", -1, "train_loss"]
        if not np.isfinite(loss):
            raise FloatingPointError(
                f"LocusEmbedder training diverged: the training loss became {loss} "
                f"in epoch {len(net.history)}; lower lr (now {net.lr}) or set "
                "gradient_clip."
            )


class ValidRoutingAccuracy(Callback):
    """Record ``valid_routing_accuracy`` each epoch: routing accuracy of the
    current network on the held-out queries that at least two models answered,
    with each model embedded from its training rows."""

    def __init__(self, valid_episodes, n_models, batch_size):
        self.valid_episodes = valid_episodes
        self.n_models = n_models
        self.batch_size = batch_size

    def initialize(self):
        items = self.valid_episodes.items
        dec_q = torch.cat([e[2] for e, _ in items]) if items else torch.empty(0)
        self.queries_, inverse = torch.unique(dec_q, return_inverse=True)
        y_true = np.full((len(self.queries_), self.n_models), np.nan)
        offset = 0
        for (_, _, qd, yd), m in items:
            y_true[inverse[offset : offset + len(qd)].numpy(), m] = yd.numpy()
            offset += len(qd)
        self.keep_ = (~np.isnan(y_true)).sum(axis=1) >= 2
        self.y_true_ = y_true[self.keep_]
        return self

    def _memory(self, device):
        """Every model's encoder rows as (index, score, indptr) for a readout."""
        sets = [(torch.empty(0, dtype=torch.long), torch.empty(0))] * self.n_models
        for (qe, ye, _, _), m in self.valid_episodes.items:
            sets[m] = (qe, ye)
        indptr = np.concatenate([[0], np.cumsum([len(q) for q, _ in sets])])
        index = torch.cat([q for q, _ in sets]).to(device)
        score = torch.cat([y for _, y in sets]).to(device)
        return index, score, indptr

    def on_epoch_begin(self, net, **kwargs):
        # skorch's validation pass embeds every validation episode, in order;
        # keep those embeddings instead of computing them a second time.
        self._seen = []
        self._hook = net.module_.encoder.register_forward_hook(self._record)

    def _record(self, module, args, output):
        if not module.training:
            self._seen.append(output.detach())

    def _release(self):
        hook, self._hook = getattr(self, "_hook", None), None
        if hook is not None:
            hook.remove()
        seen, self._seen = getattr(self, "_seen", None) or [], None
        return seen

    def on_train_end(self, net, **kwargs):
        self._release()

    def on_epoch_end(self, net, **kwargs):
        seen = self._release()
        if not self.keep_.any():
            return
        module = net.module_
        was_training = module.training
        module.eval()
        items = self.valid_episodes.items
        bank = module.query_bank
        device = bank.device
        models = torch.tensor([m for _, m in items], device=device)
        z = torch.zeros(self.n_models, module.encoder.seed.shape[-1], device=device)
        with torch.inference_mode():
            if sum(len(s) for s in seen) == len(items):
                z[models] = torch.cat(seen)
            else:  # no validation pass this epoch: embed here
                for start in range(0, len(items), self.batch_size):
                    X, _ = collate_episodes(items[start : start + self.batch_size])
                    z[models[start : start + self.batch_size]] = module.encoder(
                        bank,
                        X["enc_index"].to(device),
                        X["enc_score"].to(device),
                        X["enc_mask"].to(device),
                    )
            queries = bank[self.queries_[torch.as_tensor(self.keep_)].to(device)]
            extra = None
            if module.readout is not None:
                extra = module.readout.pairwise(queries, bank, *self._memory(device))
            logits = module.predictor.pairwise_logits(z, queries, extra)
        module.train(was_training)
        # Models with no held-out rows keep a zero z; they never count, since
        # routing only ranks the models observed on each query.
        net.history.record(
            "valid_routing_accuracy",
            routing_accuracy(self.y_true_, logits.cpu().numpy()),
        )
