"""Torch modules of the neural peer routers (no scikit-learn in here).

Each module scores (model, query) pairs: ``forward(model_index, query)`` gives
one logit per row (training), ``pairwise_logits(query)`` gives the logits of
every model of the pool for each query at once (prediction).
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["IRTNet", "MatrixFactorizationNet"]


class MatrixFactorizationNet(nn.Module):
    """EmbedLLM's matrix factorisation decoder.

    ``logit(m, x) = w . (P[m] * (W phi(x) + c)) + b``: a learned embedding per
    model multiplied element-wise with a linear projection of the query
    encoding, then a linear head.

    Parameters
    ----------
    n_models : int
    n_features : int
        Dimension of the query encodings.
    embedding_dim : int, default=232
    noise_std : float, default=0.05
        Standard deviation of Gaussian noise added to the query encodings in
        training mode only.
    """

    def __init__(self, n_models, n_features, embedding_dim=232, noise_std=0.05):
        super().__init__()
        # A float: an int (10**30) would go to torch as an int64 scalar.
        self.noise_std = float(noise_std)
        self.model_embedding = nn.Embedding(n_models, embedding_dim)
        self.query_projection = nn.Linear(n_features, embedding_dim)
        self.head = nn.Linear(embedding_dim, 1)

    def _project(self, query):
        if self.training and self.noise_std > 0:
            query = query + self.noise_std * torch.randn_like(query)
        return self.query_projection(query)

    def forward(self, model_index, query):
        """Logits of shape (n_rows,) for rows (model_index[i], query[i])."""
        hidden = self.model_embedding(model_index) * self._project(query)
        return self.head(hidden).squeeze(-1)

    def pairwise_logits(self, query):
        """Logits of shape (n_queries, n_models) for every (query, model) pair."""
        # w . (p * u) = u . (p * w): fold the head into the model embeddings.
        models = self.model_embedding.weight * self.head.weight
        return self._project(query) @ models.T + self.head.bias


class IRTNet(nn.Module):
    """Multidimensional item response theory with a neural item model.

    ``logit(m, x) = <a(x), theta_m> - b(x)``: each model has an ability vector
    ``theta_m``; an MLP on the query encoding gives the query's discrimination
    ``a(x) >= 0`` (softplus, so a larger ability never lowers P(correct)) and
    its difficulty ``b(x)``.

    Parameters
    ----------
    n_models : int
    n_features : int
        Dimension of the query encodings.
    n_dims : int, default=16
        Dimension of the ability and discrimination vectors.
    hidden_dim : int, default=128
        Width of the MLP's hidden layer.
    """

    def __init__(self, n_models, n_features, n_dims=16, hidden_dim=128):
        super().__init__()
        self.ability = nn.Embedding(n_models, n_dims)
        # Keeps the initial logits O(1) whatever n_dims is.
        nn.init.normal_(self.ability.weight, std=1 / math.sqrt(n_dims))
        self.trunk = nn.Sequential(nn.Linear(n_features, hidden_dim), nn.GELU())
        self.discrimination = nn.Linear(hidden_dim, n_dims)
        self.difficulty = nn.Linear(hidden_dim, 1)

    def item_parameters(self, query):
        """Discrimination (n_queries, n_dims) and difficulty (n_queries,)."""
        hidden = self.trunk(query)
        return F.softplus(self.discrimination(hidden)), self.difficulty(hidden).squeeze(
            -1
        )

    def forward(self, model_index, query):
        """Logits of shape (n_rows,) for rows (model_index[i], query[i])."""
        a, b = self.item_parameters(query)
        return (a * self.ability(model_index)).sum(-1) - b

    def pairwise_logits(self, query):
        """Logits of shape (n_queries, n_models) for every (query, model) pair."""
        a, b = self.item_parameters(query)
        return a @ self.ability.weight.T - b[:, None]
