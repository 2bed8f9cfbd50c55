"""Plots of the model space: dendrogram + distance heatmap, 2-D map, portfolio curve.

matplotlib is optional: it is imported when a plot is drawn.
"""

from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import dendrogram
from sklearn.decomposition import PCA, KernelPCA
from sklearn.manifold import TSNE
from sklearn.preprocessing import normalize

from .._evals import _preview
from .._params import validate_random_state
from .._text import printable
from .._warnings import ignoring
from ._common import (
    as_distances,
    as_pool,
    check_metric,
    import_pyplot,
    pool_distances,
)
from ._geometry import check_linkage, coincide, linkage_of

__all__ = ["plot_model_dendrogram", "plot_model_map", "plot_portfolio_curve"]


def plot_model_dendrogram(
    embeddings, *, names=None, method="average", metric="euclidean", heatmap=True
):
    """Dendrogram of the models, over a heatmap of their embedding distances.

    Rows and columns of the heatmap follow the leaves of the dendrogram, so
    families show as dark blocks on the diagonal (paper, figure 7).

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (a
        DataFrame such as :func:`score_disagreement`'s ``distance`` names
        them).
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows (row numbers when None); must be None
        for a router or a DataFrame.
    method : {"average", "complete", "single", "weighted", "ward"}, default="average"
        Linkage criterion (see :func:`model_linkage`).
    metric : {"cosine", "euclidean", "precomputed"}, default="euclidean"
        Distance between embeddings, or "precomputed".
    heatmap : bool, default=True
        Whether to draw the distance heatmap under the dendrogram.

    Returns
    -------
    fig : matplotlib.figure.Figure
        With the dendrogram axes first, then the heatmap and its colour bar.

    Notes
    -----
    The figure grows by 0.3 inch per model up to 100 models (about 32
    inches, 3,200 pixels at matplotlib's default 100 dpi) and keeps that size
    beyond, so that pools of thousands of models still render and save.
    Past 100 models no model name is written (they would overlap); the leaf
    order, left to right, is scipy's ``dendrogram(model_linkage(...),
    no_plot=True)["leaves"]``. ``fig.set_size_inches`` resizes the figure.

    Names are drawn as written, never as mathtext: a tick label is the name
    with each ``$`` escaped as ``\\$`` (which matplotlib draws as ``$``),
    and any character that is not printable (a control character, a lone
    surrogate) as its escape, as ``repr`` writes it (``\\udce8``).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from locus_sklearn.inspection import plot_model_dendrogram
    >>> X = [[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]]
    >>> fig = plot_model_dendrogram(X, names=["a1", "a2", "b1", "b2"])
    >>> len(fig.axes)
    3
    """
    plt = import_pyplot()
    _check_flag("heatmap", heatmap)
    check_linkage(method, metric)
    D, names = pool_distances(embeddings, names, metric=metric)
    tree = linkage_of(D, method)
    labels = [_label(n) for n in names]
    # 0.3 inch per model, up to _MAX_LABELLED models: an uncapped figure is
    # 90,000 pixels wide at 3,000 models, which no backend can render (savefig
    # fails for want of memory, a notebook's kernel dies). Past the cap the
    # names would overlap, so none is written.
    labelled = len(D) <= _MAX_LABELLED
    size = max(4.0, 0.3 * min(len(D), _MAX_LABELLED) + 2.0)
    if not heatmap:
        fig, ax = plt.subplots(figsize=(size, 4.0), layout="constrained")
        _draw_tree(
            tree,
            ax,
            labels=labels if labelled else None,
            no_labels=not labelled,
            leaf_rotation=90,
            color_threshold=None,
        )
        ax.set_ylabel(f"{metric} distance ({method} linkage)")
        return fig
    fig = plt.figure(figsize=(size + 1.0, size + 2.0), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 3], width_ratios=[30, 1])
    ax_tree = fig.add_subplot(grid[0, 0])
    leaves = _draw_tree(tree, ax_tree, no_labels=True)["leaves"]
    ax_tree.set_ylabel(f"{metric} distance")
    ax_tree.set_xticks([])
    ax_map = fig.add_subplot(grid[1, 0])
    distance = D[np.ix_(leaves, leaves)]
    image = ax_map.imshow(distance, cmap="viridis", aspect="auto")
    if labelled:
        ticks = np.arange(len(leaves))
        ordered = [labels[i] for i in leaves]
        ax_map.set_xticks(ticks, ordered, rotation=90)
        ax_map.set_yticks(ticks, ordered)
    else:
        ax_map.set_xticks([])
        ax_map.set_yticks([])
    fig.colorbar(image, cax=fig.add_subplot(grid[1, 1]), label=f"{metric} distance")
    return fig


# Models past which plot_model_dendrogram stops growing and writes no names.
_MAX_LABELLED = 100


def _draw_tree(tree, ax, **kwargs):
    """scipy's dendrogram on ``ax``; a tree of height 0 gets a unit y-axis.

    When every model is at distance 0 from the others (e.g. identical
    embeddings), scipy sets the y-limits to (0, 0), and matplotlib warns
    that it widens them; that warning, and only it, is silenced here and the
    axis is given a height of its own.
    """
    if tree[:, 2].max() > 0:
        return dendrogram(tree, ax=ax, **kwargs)
    # ignoring(): the process-wide filters under the library's lock, so that
    # blocks in two threads cannot restore each other's filters.
    with ignoring({"message": "Attempting to set identical low and high ylims"}):
        drawn = dendrogram(tree, ax=ax, **kwargs)
    ax.set_ylim(0.0, 1.0)
    return drawn


def principal_coordinates(distances, n_components=2):
    """Classical multidimensional scaling: coordinates whose Euclidean
    distances best match ``distances`` (Torgerson's principal coordinates).

    The double-centred Gram matrix -J D² J / 2 is eigendecomposed by
    :class:`~sklearn.decomposition.KernelPCA` (which centres a precomputed
    kernel itself); for Euclidean distances between embeddings this is their
    PCA. Negative eigenvalues (distances no Euclidean space holds exactly)
    are not among the leading components of a map. The eigendecomposition is
    dense (exact and deterministic, whatever the number of models).

    Parameters
    ----------
    distances : ndarray of shape (n_models, n_models)
        Symmetric, zero diagonal.
    n_components : int, default=2

    Returns
    -------
    ndarray of shape (n_models, n_components)

    Examples
    --------
    >>> import numpy as np
    >>> D = np.array([[0.0, 3.0, 4.0], [3.0, 0.0, 5.0], [4.0, 5.0, 0.0]])
    >>> P = principal_coordinates(D)  # a 3-4-5 right triangle, drawn exactly
    >>> from scipy.spatial.distance import pdist, squareform
    >>> bool(np.allclose(squareform(pdist(P)), D))
    True
    """
    gram = -0.5 * np.square(distances)
    # eigen_solver="dense": for more than 200 models KernelPCA's "auto" picks
    # ARPACK, whose start vector is drawn from the global np.random state, so
    # the map would consume (and depend on) the caller's random numbers.
    # set_output("default"): an ndarray whatever transform_output is set to
    # globally (a DataFrame is not indexed as points[:, 0]).
    return (
        KernelPCA(n_components, kernel="precomputed", eigen_solver="dense")
        .set_output(transform="default")
        .fit_transform(gram)
    )


def plot_model_map(
    embeddings,
    *,
    names=None,
    groups=None,
    method="pca",
    metric="cosine",
    annotate=True,
    ax=None,
    random_state=None,
):
    """The models in two dimensions (PCA, classical MDS or t-SNE), labelled by name.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (a
        DataFrame such as :func:`score_disagreement`'s ``distance`` names
        them).
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows (row numbers when None); must be None
        for a router or a DataFrame.
    groups : array-like of shape (n_models,), mapping or Series, default=None
        A group per model (e.g. its family), coloured with a legend. A
        mapping or Series is read by model name (its keys or index, which
        must hold every model, a Series' each once; other entries are
        ignored); other sequences give the groups in the models' order. A
        missing group (None or NaN) is refused: fill it with a group of its
        own (e.g. "unknown"). Groups are all of one type (str, int, float or
        bool): 1, 1.0 and True are equal to Python and "1" is drawn as 1, so
        mixed types would merge groups or show two alike in the legend.
    method : {"pca", "mds", "tsne"}, default="pca"
        :class:`~sklearn.decomposition.PCA` of the embeddings, classical
        multidimensional scaling of the distances (Torgerson's principal
        coordinates: the map that keeps pairwise distances as well as two
        dimensions can, and the PCA of Euclidean distances), or
        :class:`~sklearn.manifold.TSNE`. Precomputed distances
        take "mds" or "tsne". Models that coincide all (every distance 0)
        are drawn at the origin by "pca" and "mds".
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Geometry to preserve: with "cosine" PCA runs on L2-normalised
        embeddings, MDS and t-SNE on cosine distances; "precomputed" reads
        ``embeddings`` as the distances themselves.
    annotate : bool, default=True
        Whether to write each model's name next to its point: as written,
        never as mathtext (``"m$1$2"`` is drawn so), with any character
        that is not printable (a control character, a lone surrogate)
        written as its escape, as ``repr`` writes it (``\\udce8``).
    ax : matplotlib Axes, default=None
        Axes to draw on; a new figure when None.
    random_state : int, RandomState instance or None, default=None
        Seeds t-SNE (PCA and MDS are deterministic, and ignore it; it is
        checked whatever the method). With
        ``metric="euclidean"`` t-SNE starts from the embeddings' PCA, except
        for 1-D embeddings, which have no second principal component (the
        reason ``method="pca"`` refuses them), and identical embeddings,
        which have no first: they, like the other metrics, start from
        random points.

    Returns
    -------
    ax : matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from locus_sklearn.inspection import plot_model_map
    >>> X = [[1.0, 0.0, 0.1], [0.9, 0.1, 0.0], [0.0, 1.0, 0.2], [0.1, 0.9, 0.1]]
    >>> ax = plot_model_map(X, names=["a1", "a2", "b1", "b2"],
    ...                     groups=["a", "a", "b", "b"])
    >>> len(ax.texts)
    4

    Distances between models, e.g. how often two models' answers disagree:

    >>> import pandas as pd
    >>> D = pd.DataFrame([[0.0, 0.1, 0.6], [0.1, 0.0, 0.5], [0.6, 0.5, 0.0]],
    ...                  index=["m1", "m1-q4", "m2"], columns=["m1", "m1-q4", "m2"])
    >>> ax = plot_model_map(D, method="mds", metric="precomputed")
    >>> sorted(t.get_text() for t in ax.texts)
    ['m1', 'm1-q4', 'm2']
    """
    plt = import_pyplot()
    _check_flag("annotate", annotate)
    _check_axes(ax)
    if method not in ("pca", "mds", "tsne"):
        raise ValueError(f"method must be 'pca', 'mds' or 'tsne'; got {method!r}.")
    # For every method: a bad seed would otherwise pass with "pca" and "mds"
    # and fail only once the same call is made with "tsne".
    validate_random_state(random_state, caller="plot_model_map")
    precomputed = check_metric(metric, precomputed=True) == "precomputed"
    if method == "pca" and precomputed:
        raise ValueError(
            "method='pca' needs embeddings; with metric='precomputed' use "
            "method='mds' (classical MDS: the PCA of distances) or 'tsne'."
        )
    # Every input is checked before anything is computed or drawn: a failed
    # call leaves no figure behind.
    if method == "mds":
        X, names = pool_distances(embeddings, names, metric=metric)
    else:
        # t-SNE computes the metric's distances itself (squared for
        # "euclidean"), so it is given the embeddings unless they are distances.
        if precomputed:
            X, names = as_distances(embeddings, names)
        else:
            X, names = as_pool(embeddings, names, metric=metric)
    if len(names) < 2:
        raise ValueError(
            f"embeddings has {len(names)} model; a map of the models needs at least 2."
        )
    if method == "pca" and X.shape[1] < 2:
        raise ValueError(
            f"method='pca' draws 2 principal components, but embeddings has "
            f"{X.shape[1]} dimension; use method='mds' (which maps the models' "
            "distances) or embeddings of at least 2 dimensions."
        )
    if groups is not None:
        groups = _check_groups(groups, names)
    if method == "pca":
        X = normalize(X) if metric == "cosine" else X
        if coincide(X):
            # One point (e.g. a collapsed fit, or, for "cosine", embeddings
            # all pointing one way): PCA would divide its zero variance by
            # zero, with a numpy warning, or, for rows equal but for
            # rounding (parallel rows normalised differ by an ulp), spread
            # that noise over the whole plot. Every model is drawn at the
            # origin.
            points = np.zeros((len(X), 2))
        else:
            # svd_solver="full": the randomized solver PCA picks for wide
            # inputs (d > 500) would draw a different map on every call.
            # set_output("default"): an ndarray under a global
            # transform_output="pandas" too (as for t-SNE and MDS).
            points = (
                PCA(n_components=2, svd_solver="full")
                .set_output(transform="default")
                .fit_transform(X)
            )
    elif method == "mds":
        points = principal_coordinates(X)
    else:
        perplexity = float(min(30.0, max(1.0, (len(names) - 1) / 3)))
        # A PCA start needs 2 principal components: 1-D embeddings, which
        # t-SNE itself maps fine, start from random points instead. So do
        # identical embeddings: t-SNE scales its PCA start by the first
        # component's spread, 0 here, and the NaN start crashes the process.
        pca_start = metric == "euclidean" and X.shape[1] >= 2 and not (X == X[0]).all()
        tsne = TSNE(
            n_components=2,
            metric=metric,
            perplexity=perplexity,
            init="pca" if pca_start else "random",
            random_state=random_state,
        )
        points = tsne.set_output(transform="default").fit_transform(X)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 5.0), layout="constrained")
    if groups is None:
        ax.scatter(points[:, 0], points[:, 1])
    else:
        for group in dict.fromkeys(groups.tolist()):
            at = groups == group
            ax.scatter(points[at, 0], points[at, 1], label=_label(group))
        ax.legend(title="group")
    if annotate:
        for (x, y), name in zip(points, names, strict=True):
            ax.annotate(
                printable(str(name)),
                (x, y),
                textcoords="offset points",
                xytext=(3, 3),
                parse_math=False,
            )
    axis = {"pca": "PCA", "mds": "MDS", "tsne": "t-SNE"}[method]
    ax.set_xlabel(f"{axis} 1")
    ax.set_ylabel(f"{axis} 2")
    return ax


def _label(name):
    """``name`` as a tick or legend label drawn as written, with what is not
    printable escaped (:func:`~locus_sklearn._text.printable`).

    ``$`` is escaped: matplotlib reads text with two unescaped ``$`` as
    mathtext, which drew ``"m$1$2"`` changed and failed to draw
    ``"x$\\bad{$"``. Escaped, not drawn with ``parse_math=False``: a tick's
    text is made again (from these strings) whenever matplotlib resets the
    axis' ticks, without that setting.

    Examples
    --------
    >>> print(_label("m$1$2"))
    m\\$1\\$2
    """
    return printable(str(name)).replace("$", r"\$")


def _check_groups(groups, names):
    """One group per model, as an object array in the order of ``names``.

    A mapping or a Series is read by model name (its keys or index), as a
    DataFrame's rows are elsewhere, never paired with the models by position;
    any other sequence is one group per model, in their order. A missing
    group (None or NaN) is refused, as a missing task or score is.
    """
    if isinstance(groups, str):
        raise TypeError(
            f"groups must be a sequence of groups, one per model, or a mapping "
            f"model -> group; got the string {groups!r}."
        )
    if isinstance(groups, Mapping | pd.Series):
        kind = "mapping" if isinstance(groups, Mapping) else "Series"
        if kind == "Series" and not groups.index.is_unique:
            # dict(items) would keep the last group given for a name.
            repeated = groups.index[groups.index.duplicated()].unique()
            raise ValueError(
                f"groups is a Series, read by model name, but its index repeats "
                f"{len(repeated)} name(s): {_preview(repeated)}; give each model "
                "one group."
            )
        lookup = dict(groups.items())
        absent = [m for m in names.tolist() if m not in lookup]
        if absent:
            keys = groups.index if kind == "Series" else list(groups)
            raise ValueError(
                f"groups is a {kind}, read by model name, but has no group for "
                f"{len(absent)} model(s): {_preview(absent)} (its "
                f"{'index' if kind == 'Series' else 'keys'}: {_preview(keys)}). "
                "Give every model a group, or pass a list in the models' order."
            )
        groups = np.array([lookup[m] for m in names.tolist()], dtype=object)
    else:
        groups = np.asarray(list(groups), dtype=object)
        if groups.shape != (len(names),):
            raise ValueError(
                f"groups must have one entry per model, shape ({len(names)},); got "
                f"shape {groups.shape}."
            )
    missing = pd.isna(groups)
    if missing.any():
        raise ValueError(
            f"groups has {int(missing.sum())} missing value(s) (None or NaN), for "
            f"model(s) {_preview(names[missing].tolist())}; give every model a "
            "group (e.g. fill them with 'unknown') or leave groups=None."
        )
    # Groups are told apart by equality and labelled by str(): 1, 1.0 and
    # True compare equal (one colour, whichever label comes first), and 1 and
    # "1" are two groups under the same label. One type keeps both exact.
    kinds = {}
    for group in groups.tolist():
        kinds.setdefault(_group_kind(group), group)
    if len(kinds) > 1:
        shown = ", ".join(f"{k} (e.g. {v!r})" for k, v in kinds.items())
        raise TypeError(
            f"groups mixes value types: {shown}. Groups of different types can "
            "compare equal (1 == 1.0 == True) or print alike (1 and '1'), which "
            "would merge groups or repeat a legend label; give every group the "
            "same type, e.g. str."
        )
    return groups


def _group_kind(group):
    """The type a group is compared as: bool, int, float, str or its type name."""
    if isinstance(group, bool | np.bool_):
        return "bool"
    if isinstance(group, Integral):
        return "int"
    if isinstance(group, Real):
        return "float"
    if isinstance(group, str):
        return "str"
    return type(group).__name__


def _check_flag(name, value):
    """Refuse a non-bool flag: "False" or "no" is truthy, and would do the
    opposite of what was asked."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool (True or False); got {value!r}.")


def _check_axes(ax):
    """Refuse an ``ax`` that is neither None nor a matplotlib Axes, before any
    figure is made (it failed deep in matplotlib, e.g. "'Figure' object has no
    attribute 'scatter'")."""
    from matplotlib.axes import Axes

    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(
            f"ax must be a matplotlib Axes (e.g. from plt.subplots() or "
            f"fig.add_subplot()) or None; got {type(ax).__name__} {ax!r}."
        )


def plot_portfolio_curve(curve, *, ax=None, label=None, random=True, full_pool=True):
    """Plot a :func:`portfolio_curve` result: accuracy against size or budget.

    Parameters
    ----------
    curve : DataFrame
        The output of :func:`portfolio_curve`; its points are joined in
        increasing ``value`` (finite numbers). ``accuracy`` needs at least
        one finite value (NaN points are gaps), and ``full_pool_accuracy``,
        when drawn, one finite value shared by every row (one curve).
    ax : matplotlib Axes, default=None
        Axes to draw on (e.g. to overlay several selectors); a new figure when
        None.
    label : str, default=None
        Legend label of the selector's curve; "selected" when None (any other
        value, even 0 or "", is used as given).
    random : bool, default=True
        Whether to draw the random baseline (mean ± standard deviation).
    full_pool : bool, default=True
        Whether to draw the full pool's accuracy as a dashed line.

    Returns
    -------
    ax : matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import pandas as pd
    >>> from locus_sklearn.inspection import plot_portfolio_curve
    >>> curve = pd.DataFrame({"value": [1, 2], "accuracy": [0.6, 0.8],
    ...                       "random_mean": [0.5, 0.7], "random_std": [0.1, 0.05],
    ...                       "full_pool_accuracy": [0.85, 0.85]})
    >>> ax = plot_portfolio_curve(curve, label="k-medoids")
    >>> len(ax.lines)
    3
    """
    plt = import_pyplot()
    _check_axes(ax)
    _check_flag("random", random)
    _check_flag("full_pool", full_pool)
    if not isinstance(curve, pd.DataFrame):
        raise TypeError(
            "curve must be a DataFrame, the output of portfolio_curve; got "
            f"{type(curve).__name__}."
        )
    needed = ["value", "accuracy"]
    needed += ["random_mean", "random_std"] if random else []
    needed += ["full_pool_accuracy"] if full_pool else []
    missing = [c for c in needed if c not in curve.columns]
    if missing:
        raise ValueError(
            f"curve is missing column(s) {missing}; plot the output of "
            "portfolio_curve (or pass random=False / full_pool=False)."
        )
    if not len(curve):
        raise ValueError("curve is empty (0 rows); there is nothing to plot.")
    numeric = {
        column: pd.api.types.is_numeric_dtype(curve[column])
        and not pd.api.types.is_bool_dtype(curve[column])
        and not pd.api.types.is_complex_dtype(curve[column])
        for column in needed
    }
    bad = [c for c, ok in numeric.items() if not ok]
    if bad:
        # Strings would be sorted and placed as text ("10" before "2").
        wrong = ", ".join(f"{c!r} ({curve[c].dtype})" for c in bad)
        raise TypeError(
            f"curve column(s) {wrong} must hold numbers (int or float dtype); "
            f"convert them, e.g. curve[{bad[0]!r}].astype(float)."
        )
    values = curve["value"].to_numpy(dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(
            f"curve['value'] has {int((~np.isfinite(values)).sum())} value(s) that "
            "are not finite numbers (NaN or inf); every point needs a portfolio "
            "size or budget."
        )
    if not np.isfinite(curve["accuracy"].to_numpy(dtype=np.float64)).any():
        raise ValueError(
            f"curve['accuracy'] has no finite value in its {len(curve)} row(s) (all "
            "NaN: no portfolio had a scored model), so there is no curve to draw."
        )
    if full_pool:
        full = curve["full_pool_accuracy"].to_numpy(dtype=np.float64)
        if not np.isfinite(full).all() or len(np.unique(full)) > 1:
            raise ValueError(
                "curve['full_pool_accuracy'] must be one finite value on every "
                f"row (the full pool's accuracy, one line); got "
                f"{_preview(pd.unique(full))}. Plot one portfolio_curve at a "
                "time (overlay them with ax=), or pass full_pool=False."
            )
    # Lines join the points in order of value, however the rows are ordered.
    curve = curve.sort_values("value", kind="stable")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    x = curve["value"].to_numpy()
    label = "selected" if label is None else label
    ax.plot(x, curve["accuracy"], marker="o", label=label)
    if random and curve["random_mean"].notna().any():
        # Arrays, not Series: numpy 1.24.0's masked_invalid, which
        # fill_between calls, refuses a Series (numpy#22826).
        mean, std = (
            curve[c].to_numpy(dtype=np.float64, na_value=np.nan)
            for c in ("random_mean", "random_std")
        )
        (line,) = ax.plot(x, mean, linestyle=":", color="gray", label="random")
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    if full_pool:
        ax.axhline(
            curve["full_pool_accuracy"].iloc[0],
            linestyle="--",
            color="black",
            label="full pool",
        )
    ax.set_xlabel("budget" if "cost" in curve.columns else "portfolio size")
    ax.set_ylabel("routing accuracy")
    ax.legend()
    return ax
