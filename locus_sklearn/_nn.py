"""The LOCUS networks in plain PyTorch (no scikit-learn in here).

Shapes use B models per batch, N evaluation tokens per model (padded), U unique
queries per batch, F query-encoding features, d the embedding dimension.

- :class:`EvaluationTokenizer` h_ω: one token per evaluation from (φ(x), y).
- :class:`TBlock`: multi-head attention + residual + LayerNorm, then FFN
  d→2d→d + residual + LayerNorm, with key-padding masks.
- :class:`LocusEncoder` F_θ: tokenizer, L latent-bottleneck blocks, then
  learned-query pooling → z_m. No positional encodings, so z_m does not depend
  on the order of evaluations.
- :class:`CorrectnessPredictor` G_ψ: logit of P(correct | z_m, φ(x)).
- :class:`LocusNetwork`: encoder and predictor trained jointly.
"""

from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "NETWORK_LAYOUT",
    "CorrectnessPredictor",
    "EvaluationSets",
    "EvaluationTokenizer",
    "KernelReadout",
    "LocusEncoder",
    "LocusNetwork",
    "MaskedBCEWithLogitsLoss",
    "TBlock",
]


class EvaluationTokenizer(nn.Module):
    """h_ω(φ, y) = W [φ, y, φ·(2y−1)] + b, factorised per unique query.

    The query-dependent parts W_φ φ and W_± φ are computed once per unique
    query (U rows) and gathered per token, so a batch costs U·F·2d multiply-adds
    for the projections instead of B·N·F·2d.

    Parameters
    ----------
    n_features : int
        F, the dimension of φ(x).
    embedding_dim : int
        d.
    """

    def __init__(self, n_features, embedding_dim):
        super().__init__()
        self.query = nn.Linear(n_features, 2 * embedding_dim)
        self.score = nn.Parameter(torch.zeros(embedding_dim))
        nn.init.normal_(self.score, std=embedding_dim**-0.5)

    def forward(self, features, query_index, score):
        """Tokens of shape (B, N, d).

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
            Index into ``features`` of each token's query.
        score : Tensor of shape (B, N)
            y in [0, 1].
        """
        base, signed = self.query(features).chunk(2, dim=-1)
        y = score.unsqueeze(-1).to(base.dtype)
        return base[query_index] + (2 * y - 1) * signed[query_index] + y * self.score


class MultiHeadAttention(nn.Module):
    """Multi-head attention over batch-first tensors with a key-padding mask.

    Same maths as :class:`torch.nn.MultiheadAttention`, with separate query
    and key/value projections so that nothing is transposed into a copy
    before the projections; the attention itself is
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    Parameters
    ----------
    embedding_dim : int
    n_heads : int
    dropout : float, default=0.0
        Dropout on the attention weights, in training only.
    """

    def __init__(self, embedding_dim, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.query = nn.Linear(embedding_dim, embedding_dim)
        self.key_value = nn.Linear(embedding_dim, 2 * embedding_dim)
        self.out = nn.Linear(embedding_dim, embedding_dim)

    def forward(self, query, key_value, key_padding_mask=None):
        """Shape (B, n_q, d); ``key_padding_mask`` (B, n_k), True on padding."""
        b, n_q, d = query.shape
        n_k = key_value.shape[1]
        h = self.n_heads
        q = self.query(query).view(b, n_q, h, d // h).transpose(1, 2)
        k, v = (
            self.key_value(key_value).view(b, n_k, 2, h, d // h).permute(2, 0, 3, 1, 4)
        )
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # True where attention may go
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.out(attended.transpose(1, 2).reshape(b, n_q, d))


class TBlock(nn.Module):
    """TBlock(Q, K, V) = LN(H + FFN(H)) with H = LN(Q + MHA(Q, K, V)).

    Parameters
    ----------
    embedding_dim : int
    n_heads : int
    dropout : float, default=0.0
    """

    def __init__(self, embedding_dim, n_heads, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(embedding_dim, n_heads, dropout)
        self.norm1 = nn.LayerNorm(embedding_dim)
        self.ffn = nn.Sequential(
            nn.Linear(embedding_dim, 2 * embedding_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(2 * embedding_dim, embedding_dim),
        )
        self.norm2 = nn.LayerNorm(embedding_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key_value, key_padding_mask=None):
        """Shape of ``query``: (B, n_q, d); ``key_value``: (B, n_k, d);
        ``key_padding_mask``: (B, n_k) bool, True where the key is padding."""
        attended = self.attention(query, key_value, key_padding_mask)
        hidden = self.norm1(query + self.dropout(attended))
        return self.norm2(hidden + self.dropout(self.ffn(hidden)))


class LatentBottleneckBlock(nn.Module):
    """Compress N tokens into r learned latents, then broadcast back: O(N·r)."""

    def __init__(self, embedding_dim, n_heads, n_latents, dropout=0.0):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(n_latents, embedding_dim) * 0.02)
        self.compress = TBlock(embedding_dim, n_heads, dropout)
        self.broadcast = TBlock(embedding_dim, n_heads, dropout)

    def forward(self, tokens, padding_mask):
        latents = self.latents.unsqueeze(0).expand(tokens.shape[0], -1, -1)
        hidden = self.compress(latents, tokens, padding_mask)
        # Padded rows of the output are never read as keys downstream.
        return self.broadcast(tokens, hidden)


class LocusEncoder(nn.Module):
    """F_θ: a set of scored evaluations → a model embedding z_m of size d.

    Parameters
    ----------
    n_features : int
        F, dimension of the query encodings.
    embedding_dim : int, default=128
    n_latents : int, default=64
    n_blocks : int, default=2
    n_heads : int, default=4
    dropout : float, default=0.0
    """

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        dropout=0.0,
    ):
        super().__init__()
        self.tokenizer = EvaluationTokenizer(n_features, embedding_dim)
        self.blocks = nn.ModuleList(
            LatentBottleneckBlock(embedding_dim, n_heads, n_latents, dropout)
            for _ in range(n_blocks)
        )
        self.seed = nn.Parameter(torch.randn(1, 1, embedding_dim) * 0.02)
        self.pool = TBlock(embedding_dim, n_heads, dropout)

    def forward(self, features, query_index, score, mask):
        """Embeddings of shape (B, d).

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding.
        """
        # Without padding, attention can take its fastest (unmasked) kernel.
        padding = None if bool(mask.all()) else ~mask
        tokens = self.tokenizer(features, query_index, score)
        for block in self.blocks:
            tokens = block(tokens, padding)
        seed = self.seed.expand(tokens.shape[0], -1, -1)
        return self.pool(seed, tokens, padding).squeeze(1)


class KernelReadout(nn.Module):
    """What kNN knows: kernel regression of a model's scores at a query.

    From a model's evaluation set {(φ(x_i), y_i)}, the readout at query x is
    ``r = Σ w_i y_i / Σ w_i`` with ``w_i = exp((cos(φ(x), φ(x_i)) − 1) / τ)``
    and a learned bandwidth τ, and the evidence ``log(1 + Σ w_i)``. Both are
    features of the predictor, next to the embedding: the embedding carries
    what a model is like, the readout what it did on similar queries.

    Parameters
    ----------
    bandwidth : float, default=0.1
        Initial τ.
    """

    n_outputs = 2

    def __init__(self, bandwidth=0.1):
        super().__init__()
        self.log_bandwidth = nn.Parameter(torch.tensor(float(bandwidth)).log())

    def _features(self, similarity, score, mask):
        logits = (similarity - 1) / self.log_bandwidth.exp()
        logits = logits.masked_fill(~mask, float("-inf"))
        mass = torch.logsumexp(logits, dim=-1, keepdim=True)
        weights = torch.exp(logits - mass).nan_to_num(0.0)  # empty sets: all -inf
        # No evaluations: a neutral 0.5 with zero evidence.
        readout = torch.where(
            torch.isfinite(mass.squeeze(-1)), (weights * score).sum(-1), 0.5
        )
        evidence = F.softplus(mass.squeeze(-1))  # log(1 + Σ w), without overflow
        return torch.stack([2 * readout - 1, evidence], dim=-1)

    def forward(self, query_features, set_features, set_score, set_mask):
        """Readout features of shape (B, M, 2).

        Parameters
        ----------
        query_features : Tensor of shape (B, M, F)
        set_features : Tensor of shape (B, N, F)
        set_score : Tensor of shape (B, N)
        set_mask : BoolTensor of shape (B, N)
        """
        # Cosine, also for the noisy encodings seen in training.
        similarity = F.normalize(query_features, dim=-1) @ F.normalize(
            set_features, dim=-1
        ).transpose(1, 2)
        return self._features(similarity, set_score.unsqueeze(1), set_mask.unsqueeze(1))

    def pairwise(self, queries, bank, set_index, set_score, indptr, query_chunk=1024):
        """Readout features for every (query, model) pair, shape (Q, M, 2).

        The kernel weight of an evaluation depends only on its query, so the
        weighted sums over each model's evaluations are two matrix products:
        the weights of each query against the bank (Q, U) times the models'
        score sums and counts per bank query (U, M). Weights are scaled by
        each query's best similarity, in float64 when the bandwidth is so
        small that float32 could underflow; below a bandwidth of 0.003 the
        per-model log-sum-exp of :meth:`pairwise_exact` is used instead.

        Parameters
        ----------
        queries : Tensor of shape (Q, F)
        bank : Tensor of shape (U, F)
            Encodings of the queries the models were evaluated on.
        set_index : LongTensor of shape (R,)
            Row -> index into ``bank``; models' rows one after another.
        set_score : Tensor of shape (R,)
        indptr : sequence of int, length M + 1
            Model ``m`` owns rows ``indptr[m]:indptr[m + 1]``.
        query_chunk : int, default=1024
            Queries per chunk, bounding memory to Q_chunk·U floats.
        """
        tau = float(self.log_bandwidth.detach().exp())
        if tau < 0.003:
            return self.pairwise_exact(queries, bank, set_index, set_score, indptr)
        # exp(-2 / tau) is the smallest scaled weight: keep it a normal float.
        dtype = torch.float32 if 2 / tau < 80 else torch.float64
        n_models = len(indptr) - 1
        out = queries.new_zeros(queries.shape[0], n_models, self.n_outputs)
        if len(set_index) == 0:  # no evaluations: readout 0.5, evidence 0
            return out
        device = queries.device
        sizes = torch.as_tensor(np.diff(np.asarray(indptr)), device=device)
        model_of_row = torch.repeat_interleave(
            torch.arange(n_models, device=device), sizes
        )
        used, row_bank = torch.unique(set_index, return_inverse=True)
        counts = torch.zeros(len(used), n_models, dtype=dtype, device=device)
        sums = torch.zeros_like(counts)
        cells = (row_bank, model_of_row)
        counts.index_put_(
            cells, torch.ones_like(row_bank, dtype=dtype), accumulate=True
        )
        sums.index_put_(cells, set_score.to(dtype), accumulate=True)
        queries = F.normalize(queries, dim=-1)
        bank = F.normalize(bank[used], dim=-1)
        for start in range(0, queries.shape[0], query_chunk):
            similarity = queries[start : start + query_chunk] @ bank.T  # (q, U)
            best = similarity.max(dim=1, keepdim=True).values
            # In place: the (q, U) buffer is the largest one here.
            weights = similarity.sub_(best).to(dtype).mul_(1 / tau).exp_()
            mass = weights @ counts  # (q, M); zero only for models with no rows
            readout = torch.where(mass > 0, (weights @ sums) / mass, 0.5)
            log_mass = torch.log(mass) + ((best - 1) / tau).to(dtype)
            out[start : start + query_chunk] = torch.stack(
                [2 * readout - 1, F.softplus(log_mass)], dim=-1
            ).to(out.dtype)
        return out

    def pairwise_exact(
        self, queries, bank, set_index, set_score, indptr, query_chunk=256
    ):
        """:meth:`pairwise` through each model's log-sum-exp (any bandwidth;
        slower: it gathers a (Q, R) similarity matrix)."""
        n_models = len(indptr) - 1
        out = queries.new_zeros(queries.shape[0], n_models, self.n_outputs)
        queries, bank = F.normalize(queries, dim=-1), F.normalize(bank, dim=-1)
        for start in range(0, queries.shape[0], query_chunk):
            similarity = (queries[start : start + query_chunk] @ bank.T)[:, set_index]
            for m in range(n_models):
                rows = slice(int(indptr[m]), int(indptr[m + 1]))
                sim = similarity[:, rows]
                out[start : start + query_chunk, m] = self._features(
                    sim, set_score[rows], torch.ones_like(sim, dtype=torch.bool)
                )
        return out


class CorrectnessPredictor(nn.Module):
    """G_ψ: logit = MLP([z, u, z⊙u]) with u = Linear(φ) and one hidden layer.

    Parameters
    ----------
    n_features : int
    embedding_dim : int
    hidden_dim : int, default=64
    dropout : float, default=0.0
    n_extra : int, default=0
        Extra per-(model, query) inputs (a :class:`KernelReadout`'s features).
    """

    def __init__(
        self, n_features, embedding_dim, hidden_dim=64, dropout=0.0, n_extra=0
    ):
        super().__init__()
        self.project = nn.Linear(n_features, embedding_dim)
        self.hidden = nn.Linear(3 * embedding_dim, hidden_dim)
        self.extra = nn.Linear(n_extra, hidden_dim, bias=False) if n_extra else None
        self.output = nn.Linear(hidden_dim, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, z, features, query_index, extra=None):
        """Logits of shape (B, M) for B embeddings and M queries each.

        Parameters
        ----------
        z : Tensor of shape (B, d)
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, M)
        extra : Tensor of shape (B, M, n_extra), default=None
        """
        u = self.project(features)[query_index]
        zb = z.unsqueeze(1).expand_as(u)
        hidden = self.hidden(torch.cat([zb, u, zb * u], dim=-1))
        if self.extra is not None:
            hidden = hidden + self.extra(extra)
        return self.output(self.dropout(F.gelu(hidden))).squeeze(-1)

    def pairwise_logits(self, z, features, extra=None, query_chunk=1024):
        """Logits for every (query, model) pair, shape (Q, M).

        Applies the query projection once per query and the model-only terms
        once per model: the first layer W[z, u, z⊙u] splits into
        W_z z + W_u u + (W_zu ⊙ z) u, so the pairwise work is one GEMM.

        Parameters
        ----------
        z : Tensor of shape (M, d)
        features : Tensor of shape (Q, F)
        extra : Tensor of shape (Q, M, n_extra), default=None
        query_chunk : int, default=1024
            Queries per chunk, bounding memory to Q_chunk·M·hidden floats.
        """
        d = z.shape[1]
        w = self.hidden.weight  # (h, 3d)
        w_z, w_u, w_zu = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        model_term = z @ w_z.T + self.hidden.bias  # (M, h)
        # Fold W_u u in: (W_u + W_zu⊙z) u, one (h, d) matrix per model.
        model_matrix = w_u.unsqueeze(0) + w_zu.unsqueeze(0) * z.unsqueeze(1)
        m, h = model_term.shape
        flat = model_matrix.reshape(m * h, d)
        out_w = self.output.weight.reshape(h)
        chunks = []
        for start in range(0, features.shape[0], query_chunk):
            u = self.project(features[start : start + query_chunk])  # (q, d)
            hidden = (u @ flat.T).reshape(-1, m, h) + model_term
            if self.extra is not None:
                hidden = hidden + self.extra(extra[start : start + query_chunk])
            chunks.append(F.gelu(hidden) @ out_w)
        return torch.cat(chunks) + self.output.bias


class EvaluationSets(NamedTuple):
    """The scored evaluations of M models, laid out for batched readouts.

    Attributes
    ----------
    bank : Tensor of shape (U, F)
        Encodings of the queries the models were evaluated on.
    index : LongTensor of shape (R,)
        Row -> index into ``bank``; the models' rows one after another.
    score : Tensor of shape (R,)
    indptr : sequence of int, length M + 1
        Model ``m`` owns rows ``indptr[m]:indptr[m + 1]``.
    """

    bank: torch.Tensor
    index: torch.Tensor
    score: torch.Tensor
    indptr: object


# Version of the module layout (parameter names and shapes) that saved files
# record: a file of another layout cannot be loaded into this network.
NETWORK_LAYOUT = 1


class LocusNetwork(nn.Module):
    """Encoder F_θ and predictor G_ψ, trained jointly.

    The rest of the package uses three methods: ``forward`` for a training
    batch of episodes, :meth:`embed` for model embeddings and
    :meth:`pairwise_logits` for every (query, model) pair at prediction.
    ``forward`` takes, for each of B models, an encoder set (to build z_m)
    and a decoder set of queries (to predict). Gaussian noise of standard
    deviation ``query_noise`` is added to the query encodings in training
    mode only.

    Parameters
    ----------
    n_features : int
    embedding_dim, n_latents, n_blocks, n_heads : int
    hidden_dim : int, default=64
    dropout : float, default=0.0
    query_noise : float, default=0.0
    kernel_readout : bool, default=False
        Also give the predictor a :class:`KernelReadout` of the encoder set at
        each decoder query.
    n_profile_regions : int, default=0
        With R > 0, a linear *profile head* maps z to R logits: the model's
        P(correct) in each of R query regions. Training fits it to the
        decoder set's mean score per region (an auxiliary objective that
        makes z carry what a model is good at, not only how good); routing
        does not use it.

    Examples
    --------
    >>> import torch
    >>> net = LocusNetwork(8, embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2)
    >>> features = torch.randn(5, 8)
    >>> enc_index = torch.tensor([[0, 1, 2], [3, 4, 0]])
    >>> mask = torch.tensor([[True, True, True], [True, True, False]])
    >>> logits = net(features, enc_index, torch.ones(2, 3), mask,
    ...              torch.tensor([[3, 4], [1, 2]]))
    >>> tuple(logits.shape)
    (2, 2)
    >>> z = net.embed(features, enc_index, torch.ones(2, 3), mask)
    >>> tuple(net.pairwise_logits(z, features).shape)
    (5, 2)
    """

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        hidden_dim=64,
        dropout=0.0,
        query_noise=0.0,
        kernel_readout=False,
        n_profile_regions=0,
    ):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.encoder = LocusEncoder(
            n_features, embedding_dim, n_latents, n_blocks, n_heads, dropout
        )
        self.readout = KernelReadout() if kernel_readout else None
        self.predictor = CorrectnessPredictor(
            n_features,
            embedding_dim,
            hidden_dim,
            dropout,
            n_extra=KernelReadout.n_outputs if kernel_readout else 0,
        )
        self.query_noise = query_noise
        self.profile = (
            nn.Linear(embedding_dim, n_profile_regions) if n_profile_regions else None
        )

    def embed(self, features, query_index, score, mask):
        """Model embeddings z of shape (B, d) from padded evaluation sets.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
            Index into ``features`` of each evaluation's query.
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding.
        """
        return self.encoder(features, query_index, score, mask)

    def pairwise_logits(self, z, queries, evaluations=None):
        """Logits of P(correct) for every (query, model) pair, shape (Q, M).

        Parameters
        ----------
        z : Tensor of shape (M, d)
        queries : Tensor of shape (Q, F)
        evaluations : EvaluationSets, default=None
            The M models' evaluations; required with the kernel readout.
        """
        extra = None
        if self.readout is not None:
            if evaluations is None:
                raise ValueError(
                    "kernel_readout=True needs the models' evaluations to predict."
                )
            extra = self.readout.pairwise(queries, *evaluations)
        return self.predictor.pairwise_logits(z, queries, extra)

    def forward(
        self, features, enc_index, enc_score, enc_mask, dec_index,
        return_embedding=False,
    ):  # fmt: skip
        """Logits of shape (B, M) for the decoder queries of each model.

        Parameters
        ----------
        features : Tensor of shape (U, F)
            Encodings of the batch's queries; the indices point into it.
        enc_index, enc_score, enc_mask : Tensor of shape (B, N)
            Encoder sets (see :meth:`embed`).
        dec_index : LongTensor of shape (B, M)
        return_embedding : bool, default=False
            Also return the embeddings z, shape (B, d): ``(logits, z)``.
        """
        if self.training and self.query_noise > 0:
            features = features + self.query_noise * torch.randn_like(features)
        z = self.embed(features, enc_index, enc_score, enc_mask)
        extra = None
        if self.readout is not None:
            extra = self.readout(
                features[dec_index], features[enc_index], enc_score, enc_mask
            )
        logits = self.predictor(z, features, dec_index, extra)
        return (logits, z) if return_embedding else logits


class MaskedBCEWithLogitsLoss(nn.Module):
    """Binary cross-entropy over non-padding targets; padding targets are NaN.

    Fractional targets in [0, 1] are allowed (averaged duplicate runs).
    """

    def forward(self, logits, target):
        valid = ~torch.isnan(target)
        return F.binary_cross_entropy_with_logits(logits[valid], target[valid])
