"""Saved files of other versions (``_files.read_file``): files of the first
versions, which record no network layout and hold torch's
``nn.MultiheadAttention``, and files of a newer or older format or layout,
each refused with advice that fits it.

The layout-0 files in ``tests/data/layout0/`` were saved by the code of
commits 68285a4 and b94499c (``make_layout0.py`` there writes them).
"""

import os

import pytest
from safetensors import safe_open
from safetensors.torch import load, save

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn import _files as _files_module
from locus_sklearn._files import read_file, write_file
from locus_sklearn._version import __version__

DATA = os.path.join(os.path.dirname(__file__), "data")
# A router of the first version with a layout-1 network, recorded by none.
REFERENCE = os.path.join(DATA, "reference", "router_fd95f1c.safetensors")

UPGRADE = (
    "; the file was written by a newer locus_sklearn: upgrade it "
    "(pip install -U locus_sklearn) to load the file."
)
REFIT = "; refit the estimator with this version and save it again."


def _layout_message(path, layout, advice):
    return (
        f"{str(path)!r} holds a network of layout version {layout}, but this "
        f"locus_sklearn ({__version__}) builds layout version 1{advice}"
    )


@pytest.mark.parametrize(
    "cls, name",
    [
        (LocusRouter, "router_68285a4.safetensors"),
        (LocusEmbedder, "embedder_68285a4.safetensors"),
        (LocusRouter, "router_b94499c.safetensors"),
    ],
)
def test_a_file_from_before_own_attention_is_refused_as_layout_0(cls, name):
    """These were refused as "not a valid locus_sklearn file" (a tensor
    missing, or params lacking names): read as damaged, with no advice."""
    path = os.path.join(DATA, "layout0", name)
    with safe_open(path, "pt") as handle:
        assert "network_layout" not in handle.metadata()
        assert "net.encoder.pool.attention.in_proj_weight" in handle.keys()
    with pytest.raises(ValueError) as info:
        cls.load(path)
    assert str(info.value) == _layout_message(path, 0, REFIT)


def test_a_file_without_a_layout_and_with_own_attention_reads_as_layout_1():
    with safe_open(REFERENCE, "pt") as handle:
        assert "network_layout" not in handle.metadata()
    metadata, tensors, intact = read_file(REFERENCE, "LocusRouter")
    assert intact is None  # no checksum: a file of the first versions
    assert "net.encoder.pool.attention.query.weight" in tensors
    assert not any(name.endswith("in_proj_weight") for name in tensors)


@pytest.mark.parametrize(
    "layout, advice", [(2, UPGRADE), (0, REFIT)], ids=["newer", "older"]
)
def test_a_file_of_another_recorded_layout_gets_the_advice_that_fits(
    tmp_path, layout, advice
):
    """A newer layout was advised to be refitted with this (older) version."""
    metadata, tensors, _ = read_file(REFERENCE, "LocusRouter")
    path = tmp_path / "forged.safetensors"
    # Written with a valid checksum: only the layout is refused.
    write_file(path, {**metadata, "network_layout": layout}, tensors)
    with pytest.raises(ValueError) as info:
        LocusRouter.load(path)
    assert str(info.value) == _layout_message(path, layout, advice)


def _with_format_version(source, path, version):
    """Copy the saved file ``source`` to ``path`` with header field
    ``format_version`` set to the text ``version`` and a matching checksum."""
    with safe_open(source, "pt") as handle:
        header = handle.metadata()
    tensors = load(source.read_bytes())
    header["format_version"] = version
    header["checksum"] = _files_module._digest(header, tensors)
    path.write_bytes(save(tensors, metadata=header))


@pytest.mark.parametrize(
    "version, advice",
    [("2", UPGRADE), ("0", REFIT), ("1.0", ".")],
    ids=["newer", "older", "not a number"],
)
def test_a_file_of_another_format_version_gets_the_advice_that_fits(
    tmp_path, version, advice
):
    """The refusal gave no advice, newer or older."""
    metadata, tensors, _ = read_file(REFERENCE, "LocusRouter")
    current = tmp_path / "current.safetensors"
    write_file(current, metadata, tensors)
    path = tmp_path / "forged.safetensors"
    _with_format_version(current, path, version)
    with pytest.raises(ValueError) as info:
        LocusRouter.load(path)
    assert str(info.value) == (
        f"{str(path)!r} has format version {version}; this locus_sklearn "
        f"({__version__}) reads version 1{advice}"
    )
