"""Where the library's warnings point: the first frame outside locus_sklearn,
scikit-learn and joblib (``_warnings.external_stacklevel``)."""

import inspect
import os
import sys
import textwrap
import warnings

import pytest

from locus_sklearn._warnings import SKIPPED_PREFIXES, external_stacklevel

# A small "library" on disk: a public function that warns two frames down.
LIBRARY = """
import warnings

from locus_sklearn._warnings import external_stacklevel


def _warn(prefixes):
    warnings.warn("look", UserWarning, stacklevel=external_stacklevel(prefixes))


def _inner(prefixes):
    _warn(prefixes)


def public(prefixes):
    _inner(prefixes)
"""


@pytest.fixture
def library(tmp_path, monkeypatch):
    package = tmp_path / "fakelib"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(LIBRARY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    import fakelib

    return fakelib, str(package) + os.sep


def _caught(function, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        function(*args)
    assert len(caught) == 1
    return caught[0], line


def test_the_warning_points_past_the_skipped_files(library):
    fakelib, prefix = library
    warning, line = _caught(fakelib.public, (prefix,))
    # Three frames of the library skipped: the line of this file that called it.
    assert (warning.filename, warning.lineno) == (__file__, line)


def test_without_prefixes_the_warning_points_at_its_caller(library):
    fakelib, prefix = library
    warning, _ = _caught(fakelib.public, ())
    assert warning.filename == os.path.join(prefix, "__init__.py")
    assert warning.lineno == 8  # the warnings.warn line of _warn


def test_a_library_imported_through_an_unnormalised_path_is_skipped(library):
    fakelib, prefix = library
    # The same file loaded as <tmp>/other/../fakelib/__init__.py (as sys.path
    # entries with ".." import): its code objects carry that path, which does
    # not start with the real prefix <tmp>/fakelib/.
    parent = os.path.dirname(prefix.rstrip(os.sep))
    os.mkdir(os.path.join(parent, "other"))
    roundabout = os.path.join(parent, "other", "..", "fakelib", "__init__.py")
    assert not roundabout.startswith(prefix)
    namespace = {}
    exec(compile(open(roundabout).read(), roundabout, "exec"), namespace)
    warning, line = _caught(namespace["public"], (prefix,))
    assert (warning.filename, warning.lineno) == (__file__, line)


def test_when_every_frame_is_skipped_the_outermost_is_named():
    # Every file name starts with "": nothing is outside; no error, the
    # outermost frame (this process's entry point).
    assert external_stacklevel(("",)) == len(inspect.stack())


def test_the_skipped_packages_are_directories():
    import joblib
    import sklearn

    import locus_sklearn

    for module in (locus_sklearn, sklearn, joblib):
        real = os.path.dirname(os.path.realpath(module.__file__))
        assert real + os.sep in SKIPPED_PREFIXES
    # A sibling whose name only starts with a skipped one is not skipped.
    assert all(prefix.endswith(os.sep) for prefix in SKIPPED_PREFIXES)
    assert not (os.path.dirname(sklearn.__file__) + "_extra" + os.sep).startswith(
        SKIPPED_PREFIXES
    )


# parallel._chunked._close_quietly: joblib's "tasks ... cancelled" warning is
# quieted while the chunked run is stopped on an error, without leaving a
# filter behind and without holding FILTERS_LOCK while workers finish.
def _warn_from_joblib(text="tasks have been cancelled"):
    warnings.warn_explicit(
        text,
        UserWarning,
        "joblib/parallel.py",
        1,
        module="joblib.parallel",
        registry={},
    )


def test_closing_chunks_early_quiets_joblib_only_while_closing():
    from locus_sklearn.parallel._chunked import _close_quietly

    class Results:
        def close(self):
            _warn_from_joblib()
            warnings.warn("the user's warning", UserWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        _close_quietly(Results())
        assert warnings.filters == before
        _warn_from_joblib("after the close")
    assert [str(w.message) for w in caught] == ["the user's warning", "after the close"]


def test_closing_chunks_early_leaves_no_filter_behind_another_threads_block():
    # The close overlapped an ignoring() block of another thread (an ONNX
    # export, a portfolio curve): the two saved-and-restored filter lists
    # crossed and "ignore joblib's UserWarnings" stayed for the process.
    # The order is forced: the other block starts while the results close
    # and ends after them.
    import threading

    from locus_sklearn._warnings import ignoring
    from locus_sklearn.parallel._chunked import _close_quietly

    closing, other_entered, closed_quietly = (threading.Event() for _ in range(3))

    class Results:
        def close(self):
            closing.set()
            assert other_entered.wait(10)

    def close_early():
        _close_quietly(Results())
        closed_quietly.set()

    def other_block():
        assert closing.wait(10)
        with ignoring({"message": "noise", "category": UserWarning}):
            other_entered.set()
            # _close_quietly takes its filter out only once this block has
            # ended (it waits for the lock): the wait runs out. Before, it
            # returned at once, and this block then restored the filter.
            closed_quietly.wait(0.5)

    with warnings.catch_warnings():  # a leak stays inside this test
        before = list(warnings.filters)
        threads = [
            threading.Thread(target=close_early),
            threading.Thread(target=other_block),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert closed_quietly.is_set()
        assert warnings.filters == before
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            _warn_from_joblib("a later joblib warning")
        assert len(caught) == 1


def test_closing_chunks_early_with_the_lock_held_elsewhere_neither_waits_nor_quiets():
    import threading

    from locus_sklearn._warnings import FILTERS_LOCK
    from locus_sklearn.parallel._chunked import _close_quietly

    held, release = threading.Event(), threading.Event()

    def hold_the_lock():
        with FILTERS_LOCK:
            held.set()
            release.wait(10)

    class Results:
        def close(self):
            _warn_from_joblib()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(10)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            before = list(warnings.filters)
            _close_quietly(Results())  # returns although the lock is held
            assert warnings.filters == before
        # One spurious warning rather than a filter changed outside the lock.
        assert [str(w.message) for w in caught] == ["tasks have been cancelled"]
    finally:
        release.set()
        holder.join(10)


def test_closing_chunks_early_does_not_hold_the_lock_while_workers_finish():
    # Closing joblib's results waits for its worker threads, which may take
    # FILTERS_LOCK: held across the close, neither would ever end.
    import threading

    from locus_sklearn._warnings import FILTERS_LOCK
    from locus_sklearn.parallel._chunked import _close_quietly

    class Results:
        def close(self):
            def worker():
                with FILTERS_LOCK:
                    pass

            thread = threading.Thread(target=worker)
            thread.start()
            thread.join(5)  # as a thread pool's terminate() joins its workers
            self.worker_finished = not thread.is_alive()

    results = Results()
    with warnings.catch_warnings():
        before = list(warnings.filters)
        _close_quietly(results)
        assert warnings.filters == before
    assert results.worker_finished
