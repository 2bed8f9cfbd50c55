"""Subclasses of LocusEmbedder and LocusRouter, written the scikit-learn way:
one that adds a parameter, one that fixes some of the base class's in its
``super().__init__`` call (a preset). Each fits, and its ``save`` / ``load``
keeps its parameters or refuses the file naming the class to load it with
(a file holds no code, so ``load`` builds the class it is given).
"""

import inspect
import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.preprocessing import StandardScaler

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn._files import read_file, write_file
from locus_sklearn.datasets import make_model_pool

# Small enough that a fit takes about a second.
SETTINGS = dict(
    embedding_dim=8,
    n_latents=2,
    n_blocks=1,
    n_heads=2,
    hidden_dim=8,
    enc_size=(16, 64),
    dec_size=32,
    episodes_per_epoch=16,
    batch_size=8,
    max_epochs=1,
    random_state=0,
)

# Every parameter of LocusEmbedder stays in the signature and one is added,
# as scikit-learn asks of a subclass (written out from LocusEmbedder's own
# signature, so that it follows any parameter added there).
_KEYWORDS = [
    p
    for p in inspect.signature(LocusEmbedder.__init__).parameters.values()
    if p.kind == p.KEYWORD_ONLY
]
_namespace = {"LocusEmbedder": LocusEmbedder, "__name__": __name__}
exec(
    "class WideEmbedder(LocusEmbedder):\n"
    '    """A LocusEmbedder with one more parameter."""\n'
    "    def __init__(self, encoder=None, *, "
    + ", ".join(f"{p.name}={p.default!r}" for p in _KEYWORDS)
    + ", temperature=1.0):\n"
    "        super().__init__(encoder, "
    + ", ".join(f"{p.name}={p.name}" for p in _KEYWORDS)
    + ")\n"
    "        self.temperature = temperature\n",
    _namespace,
)
WideEmbedder = _namespace["WideEmbedder"]


class SmallEmbedder(LocusEmbedder):
    """A preset: the architecture fixed, three settings exposed."""

    def __init__(self, encoder=None, *, embedding_dim=8, random_state=0):
        fixed = {**SETTINGS, "embedding_dim": embedding_dim}
        super().__init__(encoder, **{**fixed, "random_state": random_state})


class TopKRouter(LocusRouter):
    """A LocusRouter with one more parameter."""

    def __init__(
        self, embedder=None, *, cost_weight=0.0, shrinkage="auto",
        shrinkage_repeats=1, top_k=1,
    ):  # fmt: skip
        super().__init__(
            embedder,
            cost_weight=cost_weight,
            shrinkage=shrinkage,
            shrinkage_repeats=shrinkage_repeats,
        )
        self.top_k = top_k


class RepeatedRouter(LocusRouter):
    """A preset: ``shrinkage_repeats`` fixed at 2, out of the signature."""

    def __init__(self, embedder=None, *, cost_weight=0.0, shrinkage="auto"):
        super().__init__(
            embedder, cost_weight=cost_weight, shrinkage=shrinkage, shrinkage_repeats=2
        )


@pytest.fixture(scope="module")
def small_pool():
    return make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)


@pytest.fixture(scope="module")
def queries(small_pool):
    return small_pool.evals["query"].unique()[:10]


@pytest.fixture(scope="module")
def wide_router(small_pool):
    embedder = WideEmbedder(small_pool.encodings, temperature=2.5, **SETTINGS)
    return LocusRouter(embedder, shrinkage=None).fit(small_pool.evals)


def _name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def _settings(embedder):
    """An embedder's parameters but its encoder (a loaded one's is the
    file's copy of the mapping)."""
    return {k: v for k, v in embedder.get_params().items() if k != "encoder"}


# ------------------------------------------------- an embedder with more params
def test_a_router_with_a_wider_embedder_loads_given_its_class(
    tmp_path, wide_router, queries
):
    """save wrote the file, and LocusRouter.load refused it as "not a valid
    locus_sklearn file", with no way to pass the embedder's class."""
    path = tmp_path / "r.locus"
    wide_router.save(path)
    metadata = read_file(path, "LocusRouter")[0]
    assert metadata["params"]["temperature"] == 2.5
    assert metadata["embedder_class"] == _name(WideEmbedder)
    message = (
        f"{str(path)!r} cannot be loaded with embedder_class=LocusEmbedder: header "
        "field 'params' has unknown names ['temperature'], parameters that "
        "LocusEmbedder does not take: it was saved from an embedder of class "
        f"{_name(WideEmbedder)!r}. A saved file holds no code, so load builds the "
        "class it is given, never one named in the file: load it with the class "
        "it was saved from, as in LocusRouter.load(path, embedder_class="
        "WideEmbedder)."
    )
    with pytest.raises(ValueError) as info:
        LocusRouter.load(path)
    assert str(info.value) == message

    loaded = LocusRouter.load(path, embedder_class=WideEmbedder)
    assert type(loaded.embedder_) is WideEmbedder
    assert type(loaded.embedder) is WideEmbedder
    assert loaded.embedder_.temperature == 2.5
    assert _settings(loaded.embedder) == _settings(wide_router.embedder)
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), wide_router.predict_proba(queries)
    )
    # Saved again, it is the same file's content.
    loaded.save(tmp_path / "again.locus")
    assert (
        read_file(tmp_path / "again.locus", "LocusRouter")[0]["params"]
        == (metadata["params"])
    )


def test_a_file_of_an_earlier_version_naming_no_class_is_advised(
    tmp_path, wide_router, queries
):
    """Such files (params with the subclass's names, no embedder_class) load
    given the class, and are refused naming none."""
    path = tmp_path / "r.locus"
    wide_router.save(path)
    metadata, tensors, _ = read_file(path, "LocusRouter")
    del metadata["embedder_class"]
    write_file(path, metadata, tensors)
    with pytest.raises(ValueError, match=re.escape(
        "it was saved from an embedder of a subclass that has them. A saved file "
        "holds no code, so load builds the class it is given, never one named in "
        "the file: load it with the class it was saved from, as in "
        "LocusRouter.load(path, embedder_class=TheSubclass)."
    )):  # fmt: skip
        LocusRouter.load(path)
    loaded = LocusRouter.load(path, embedder_class=WideEmbedder)
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), wide_router.predict_proba(queries)
    )


def test_an_embedder_file_of_a_wider_embedder_names_its_load(tmp_path, wide_router):
    path = tmp_path / "e.locus"
    wide_router.embedder_.save(path)
    with pytest.raises(ValueError) as info:
        LocusEmbedder.load(path)
    assert str(info.value).startswith(
        f"{str(path)!r} cannot be loaded with LocusEmbedder: header field 'params' "
        "has unknown names ['temperature']"
    )
    assert str(info.value).endswith("as in WideEmbedder.load(path).")
    assert WideEmbedder.load(path).temperature == 2.5


def test_a_file_without_the_classes_parameters_loads_them_as_defaults(
    tmp_path, small_pool, queries
):
    """A file naming no class was saved from a class without parameters of
    its own, or from the subclass by a version that did not save them (which
    loaded it with them reset): loaded, with their defaults, and said."""
    router = LocusRouter(LocusEmbedder(small_pool.encodings, **SETTINGS))
    path = tmp_path / "r.locus"
    router.fit(small_pool.evals).save(path)
    # Files of other routers are as before (readable by earlier versions).
    metadata = read_file(path, "LocusRouter")[0]
    assert not {"embedder_class", "router_class", "router_params"} & set(metadata)
    with pytest.warns(UserWarning) as record:
        loaded = LocusRouter.load(path, embedder_class=WideEmbedder)
    assert str(record[0].message) == (
        f"{str(path)!r} holds no ['temperature'], parameters of WideEmbedder: it "
        "was saved from an embedder of a class without them, or by a locus_sklearn "
        "that did not save a subclass's parameters; they take WideEmbedder's "
        "defaults."
    )
    assert type(loaded.embedder_) is WideEmbedder
    assert loaded.embedder_.temperature == 1.0  # WideEmbedder's default
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    with pytest.warns(
        UserWarning, match="holds no \\['top_k'\\], parameters of TopKRouter"
    ):
        assert TopKRouter.load(path).top_k == 1  # TopKRouter's default


@pytest.mark.parametrize("given", ["WideEmbedder", StandardScaler, LocusRouter])
def test_embedder_class_must_be_a_locus_embedder_class(tmp_path, wide_router, given):
    path = tmp_path / "r.locus"
    wide_router.save(path)
    with pytest.raises(TypeError) as info:
        LocusRouter.load(path, embedder_class=given)
    assert str(info.value) == (
        f"embedder_class must be LocusEmbedder or a subclass of it; got {given!r}."
    )


def test_a_parameter_a_file_cannot_hold_is_refused_at_save(tmp_path, small_pool):
    """A tuple would load as a list; an object cannot be written safely."""
    embedder = WideEmbedder(small_pool.encodings, temperature=(1.0, 2.0), **SETTINGS)
    router = LocusRouter(embedder, shrinkage=None).fit(small_pool.evals)
    message = (
        "WideEmbedder's parameter temperature (a tuple) cannot be saved: a file "
        "holds the parameters a subclass adds only as None, a bool, an int, a float "
        "or a str, and no code to rebuild other objects. Give it such a value, or "
        "pickle the estimator (joblib.dump), which keeps it."
    )
    for save in (router.save, router.embedder_.save):
        with pytest.raises(ValueError) as info:
            save(tmp_path / "r.locus")
        assert str(info.value) == message
    assert not (tmp_path / "r.locus").exists()
    # A NumPy scalar is stored as the equal Python value.
    router.embedder_.set_params(temperature=np.float32(0.5))
    router.embedder.set_params(temperature=np.float32(0.5))
    router.save(tmp_path / "r.locus")
    loaded = LocusRouter.load(tmp_path / "r.locus", embedder_class=WideEmbedder)
    assert loaded.embedder_.temperature == 0.5
    assert type(loaded.embedder_.temperature) is float


def test_an_embedder_parameter_of_other_parameters_is_refused_at_save(
    tmp_path, wide_router, fitted_copy
):
    """A file loads the parameter and the fitted embedder with one class."""
    router = fitted_copy(wide_router, embedder=LocusEmbedder(**SETTINGS))
    with pytest.raises(ValueError, match=re.escape(
        "embedder parameter, set after fit, is a LocusEmbedder, whose own "
        "parameters [] differ from those of the fitted embedder_'s class "
        "WideEmbedder (['temperature'])"
    )):  # fmt: skip
        router.save(tmp_path / "r.locus")


# ------------------------------------------- an embedder with fewer parameters
def test_an_embedder_that_fixes_some_parameters_fits_saves_and_loads(
    tmp_path, small_pool, queries
):
    """fit failed with KeyError: 'memory' (the network's settings were read
    from get_params, which lists the signature's only)."""
    small = SmallEmbedder(small_pool.encodings)
    assert sorted(small.get_params()) == ["embedding_dim", "encoder", "random_state"]
    plain = LocusEmbedder(small_pool.encodings, **SETTINGS)
    # The same network as LocusEmbedder's with those settings.
    np.testing.assert_array_equal(
        small.fit(small_pool.evals).transform(small_pool.evals),
        plain.fit(small_pool.evals).transform(small_pool.evals),
    )
    router = LocusRouter(SmallEmbedder(small_pool.encodings), shrinkage=None)
    router.fit(small_pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = LocusRouter.load(path, embedder_class=SmallEmbedder)
    assert type(loaded.embedder_) is SmallEmbedder
    assert type(loaded.embedder) is SmallEmbedder
    assert loaded.embedder_.n_latents == SETTINGS["n_latents"]
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    np.testing.assert_array_equal(
        clone(loaded).fit(small_pool.evals).model_embeddings_, router.model_embeddings_
    )
    # It has no parameter of its own: the file is a LocusEmbedder's.
    assert "embedder_class" not in read_file(path, "LocusRouter")[0]
    assert type(LocusRouter.load(path).embedder_) is LocusEmbedder
    small.save(tmp_path / "e.locus")
    again = SmallEmbedder.load(tmp_path / "e.locus")
    np.testing.assert_array_equal(
        again.transform(small_pool.evals), small.transform(small_pool.evals)
    )


# ------------------------------------------------------------- router subclasses
def test_a_router_subclass_keeps_its_parameter(tmp_path, small_pool, queries):
    """TopKRouter.load reset top_k to its default, without a warning."""
    embedder = LocusEmbedder(small_pool.encodings, **SETTINGS)
    router = TopKRouter(embedder, shrinkage=None, top_k=3).fit(small_pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    metadata = read_file(path, "LocusRouter")[0]
    assert metadata["router_class"] == _name(TopKRouter)
    assert metadata["router_params"] == {"top_k": 3}
    loaded = TopKRouter.load(path)
    assert type(loaded) is TopKRouter
    assert loaded.top_k == 3
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    with pytest.raises(ValueError) as info:
        LocusRouter.load(path)
    assert str(info.value) == (
        f"{str(path)!r} cannot be loaded with LocusRouter: header field "
        "'router_params' has unknown names ['top_k'], parameters that LocusRouter "
        f"does not take: it was saved from a router of class {_name(TopKRouter)!r}. "
        "A saved file holds no code, so load builds the class it is given, never "
        "one named in the file: load it with the class it was saved from, as in "
        "TopKRouter.load(path)."
    )
    router.set_params(top_k=[1, 2])
    with pytest.raises(ValueError, match="TopKRouter's parameter top_k \\(a list\\)"):
        router.save(tmp_path / "bad.locus")


def test_a_router_subclass_that_fixes_a_parameter_loads(tmp_path, small_pool):
    """load passed every LocusRouter parameter to the class: TypeError."""
    embedder = LocusEmbedder(small_pool.encodings, **SETTINGS)
    router = RepeatedRouter(embedder, shrinkage=None).fit(small_pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = RepeatedRouter.load(path)
    assert type(loaded) is RepeatedRouter
    assert loaded.shrinkage_repeats == 2
    assert loaded.get_params(deep=False) == {
        "embedder": loaded.embedder,
        "cost_weight": 0.0,
        "shrinkage": None,
    }
