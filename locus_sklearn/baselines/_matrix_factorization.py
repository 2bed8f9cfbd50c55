"""EmbedLLM's matrix factorisation router."""

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval

from ._net_router import _NetRouter
from ._nn import MatrixFactorizationNet

__all__ = ["MatrixFactorizationRouter"]


class MatrixFactorizationRouter(_NetRouter):
    """Router of EmbedLLM (Zhuang et al., 2025): matrix factorisation on correctness.

    Each model of the pool gets a learned embedding ``p_m``; a query's
    encoding ``phi(x)`` is projected linearly to the same dimension, the two
    are multiplied element-wise and a linear head gives the logit of
    P(correct)::

        P(correct | m, x) = sigmoid(w . (p_m * (W phi(x) + c)) + b)

    Trained with binary cross-entropy (fractional scores are soft targets)
    and Adam, with small Gaussian noise on ``phi(x)`` during training only.
    Early stopping watches the loss on a held-out fraction of the queries.

    The model embeddings are free parameters indexed by model id, so a new
    model (or new evaluations of a model) requires refitting the router on
    the whole pool.

    Parameters
    ----------
    embedding_dim : int, default=232
        Dimension of the model embeddings (EmbedLLM's value).
    encoder : None, str, object with ``encode`` or mapping, default=None
        Query encoder (see :class:`~locus_sklearn.QueryEncoder`); None uses
        the bundled all-MiniLM-L6-v2.
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of query encodings across fits and calls, predictions
        included; nothing evicts an entry (see
        :class:`~locus_sklearn.QueryEncoder`).
    cost_weight : float, default=0.0
        Weight of the model costs in :meth:`predict` (utility
        ``P(correct) - cost_weight * cost``).
    noise_std : float, default=0.05
        Standard deviation of the Gaussian noise added to the query encodings
        in training (EmbedLLM's ``alpha``).
    max_epochs : int, default=100
        Maximum number of passes over the evaluation rows.
    batch_size : int, default=2048
        Rows per optimisation step.
    lr : float, default=1e-3
        Adam learning rate. A training loss that stops being finite (too
        large a rate) stops ``fit`` with a ``FloatingPointError``.
    weight_decay : float, default=0.0
        Adam (L2) weight decay.
    validation_fraction : float or None, default=0.1
        Fraction of the distinct queries (with all their rows) held out for
        early stopping; None trains for ``max_epochs`` on every row. A model
        keeps one training row: held-out rows that would leave it none stay
        in training.
    patience : int, default=5
        Epochs without improvement of the validation loss before stopping;
        the weights of the best epoch are kept.
    device : None, str or torch.device, default=None
        Torch device; None uses CUDA when available, else the CPU.
    random_state : int, RandomState instance or None, default=None
        Seeds initialisation, the validation split, shuffling and noise; an
        int gives a reproducible fit on CPU.
    verbose : int, default=0
        Print skorch's per-epoch table, and early stopping's messages, to
        standard error when > 0.

    Attributes
    ----------
    classes_ : ndarray of str, shape (n_models,)
        Model names, sorted.
    model_costs_ : ndarray of shape (n_models,) or None
        Costs passed to :meth:`fit`, in ``classes_`` order.
    encoder_ : QueryEncoder
        The fitted query encoder.
    n_query_features_ : int
        Dimension of the query encodings.
    net_ : skorch.NeuralNet
        The trained net; ``net_.module_`` is a
        :class:`~locus_sklearn.baselines._nn.MatrixFactorizationNet`.
    n_epochs_ : int
        Number of epochs finished (one cut short by Ctrl-C is not counted).

    See Also
    --------
    IRTRouter : a neural item response theory router.
    KNNRouter : mean score of each model on the nearest training queries.

    Notes
    -----
    EmbedLLM trains with a learning rate of order 1e-4 for many epochs; the
    default 1e-3 with batches of 2048 rows converges in a few tens of epochs
    on pools of 10^4-10^5 rows, and early stopping ends the fit there.
    A fitted router pickles with its skorch net; a net trained on CUDA loads
    on a machine without CUDA on the CPU (skorch maps it there with a
    ``DeviceWarning``).

    Examples
    --------
    >>> from locus_sklearn.baselines import MatrixFactorizationRouter
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "q3": [0.7, 0.7]}
    >>> evals = {"model": ["a", "a", "a", "b", "b", "b"],
    ...          "query": ["q1", "q2", "q3", "q1", "q2", "q3"],
    ...          "score": [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]}
    >>> router = MatrixFactorizationRouter(embedding_dim=8, encoder=encoder,
    ...                                    validation_fraction=None, max_epochs=5,
    ...                                    random_state=0).fit(evals)
    >>> router.predict_proba(["q1", "q2"]).shape
    (2, 2)
    >>> router.classes_.tolist()
    ['a', 'b']
    """

    _parameter_constraints = {
        **_NetRouter._parameter_constraints,
        "embedding_dim": [Interval(Integral, 1, None, closed="left")],
        "noise_std": [Interval(Real, 0, None, closed="left")],
    }
    _module = MatrixFactorizationNet

    def __init__(
        self,
        *,
        embedding_dim=232,
        encoder=None,
        memory=None,
        cost_weight=0.0,
        noise_std=0.05,
        max_epochs=100,
        batch_size=2048,
        lr=1e-3,
        weight_decay=0.0,
        validation_fraction=0.1,
        patience=5,
        device=None,
        random_state=None,
        verbose=0,
    ):
        self.embedding_dim = embedding_dim
        self.encoder = encoder
        self.memory = memory
        self.cost_weight = cost_weight
        self.noise_std = noise_std
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    _loss_scales = ("weight_decay", "noise_std")

    def _module_params(self, table, X_query):
        return {"embedding_dim": self.embedding_dim, "noise_std": self.noise_std}
