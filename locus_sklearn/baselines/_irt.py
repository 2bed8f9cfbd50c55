"""IRT-Net style router: multidimensional item response theory."""

from numbers import Integral

from sklearn.utils._param_validation import Interval

from ._net_router import _NetRouter
from ._nn import IRTNet

__all__ = ["IRTRouter"]


class IRTRouter(_NetRouter):
    """Router of item response theory with a neural item model (IRT-Net style).

    Each model of the pool has an ability vector ``theta_m``; from a query's
    encoding ``phi(x)`` a one-hidden-layer MLP gives the query's
    discrimination ``a(x) >= 0`` (a vector) and difficulty ``b(x)``::

        P(correct | m, x) = sigmoid(<a(x), theta_m> - b(x))

    Trained with binary cross-entropy (fractional scores are soft targets)
    and Adam; early stopping watches the loss on a held-out fraction of the
    queries. Abilities are free parameters indexed by model id, so a new
    model requires refitting the router.

    Parameters
    ----------
    n_dims : int, default=16
        Dimension of the ability and discrimination vectors.
    hidden_dim : int, default=128
        Width of the hidden layer of the item MLP.
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
    max_epochs : int, default=100
        Maximum number of passes over the evaluation rows.
    batch_size : int, default=2048
        Rows per optimisation step.
    lr : float, default=1e-3
        Adam learning rate. A training loss that stops being finite (too
        large a rate) stops ``fit`` with a ``FloatingPointError``.
    weight_decay : float, default=1e-3
        Adam (L2) weight decay. The item MLP overfits the training queries
        without it; 1e-3 gave the best held-out loss on real MMLU-Pro data
        (1e-2 underfits).
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
        Seeds initialisation, the validation split and shuffling; an int
        gives a reproducible fit on CPU.
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
        :class:`~locus_sklearn.baselines._nn.IRTNet` and
        ``net_.module_.ability.weight`` holds the abilities, shape
        (n_models, n_dims).
    n_epochs_ : int
        Number of epochs finished (one cut short by Ctrl-C is not counted).

    See Also
    --------
    MatrixFactorizationRouter : EmbedLLM's matrix factorisation router.

    Notes
    -----
    The discrimination goes through a softplus, so raising any ability
    coordinate never lowers a model's P(correct). A fitted router pickles
    with its skorch net; a net trained on CUDA loads on the CPU of a machine
    without CUDA (skorch maps it there with a ``DeviceWarning``).

    Examples
    --------
    >>> from locus_sklearn.baselines import IRTRouter
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "q3": [0.7, 0.7]}
    >>> evals = {"model": ["a", "a", "a", "b", "b", "b"],
    ...          "query": ["q1", "q2", "q3", "q1", "q2", "q3"],
    ...          "score": [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]}
    >>> router = IRTRouter(n_dims=2, hidden_dim=8, encoder=encoder,
    ...                    validation_fraction=None, max_epochs=5,
    ...                    random_state=0).fit(evals)
    >>> router.predict_proba(["q1", "q2"]).shape
    (2, 2)
    """

    _parameter_constraints = {
        **_NetRouter._parameter_constraints,
        "n_dims": [Interval(Integral, 1, None, closed="left")],
        "hidden_dim": [Interval(Integral, 1, None, closed="left")],
    }
    _module = IRTNet

    def __init__(
        self,
        *,
        n_dims=16,
        hidden_dim=128,
        encoder=None,
        memory=None,
        cost_weight=0.0,
        max_epochs=100,
        batch_size=2048,
        lr=1e-3,
        weight_decay=1e-3,
        validation_fraction=0.1,
        patience=5,
        device=None,
        random_state=None,
        verbose=0,
    ):
        self.n_dims = n_dims
        self.hidden_dim = hidden_dim
        self.encoder = encoder
        self.memory = memory
        self.cost_weight = cost_weight
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def _module_params(self, table, X_query):
        return {"n_dims": self.n_dims, "hidden_dim": self.hidden_dim}
