"""Model names and query texts that are awkward as text: carriage returns,
lone surrogates, Unicode normal forms, files and arguments that are not
UTF-8.
"""

import gzip
import io
import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, locus

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn._base import check_model_subset
from locus_sklearn._cli import main
from locus_sklearn._cli._io import read_costs, read_embeddings, write_csv
from locus_sklearn.datasets import load_evals, make_model_pool
from locus_sklearn.inspection import nearest_models

NFD = unicodedata.normalize("NFD", "café-7b")  # as an export or macOS wrote it
NFC = unicodedata.normalize("NFC", "café-7b")  # as a user types it
SURROGATE = b"mod\xe8le".decode("utf-8", "surrogateescape")  # "mod\udce8le"
JAPANESE = "日本語モデル"
QUERY = "古代ギリシャを学ぶ上で知っておくべきポイントは？"
# The names a csv writer must quote: a lone CR (a CRLF file split on "\n"),
# a CR inside, a LF, a quote and a comma.
AWKWARD = ["gpt-4\r", "a\rb", 'say "hi", x\ny']
NAMES = [*AWKWARD, NFD, SURROGATE, JAPANESE, "llama"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(router path, evals, encodings) of a tiny router whose pool is NAMES."""
    pool = make_model_pool(
        len(NAMES), 60, n_tasks=2, n_families=2, evals_per_model=40,
        n_features=8, random_state=0,
    )  # fmt: skip
    evals = pool.evals.copy()
    renamed = dict(zip(sorted(evals["model"].unique()), NAMES, strict=True))
    evals["model"] = pd.Series(
        [renamed[m] for m in evals["model"]], dtype=object, index=evals.index
    )
    encodings = {**pool.encodings, QUERY: pool.encodings["q00"]}
    router = LocusRouter(
        LocusEmbedder(encodings, **{**TINY, "max_epochs": 1, "random_state": 0})
    ).fit(evals)
    path = tmp_path_factory.mktemp("unicode") / "router.locus"
    router.save(path)
    return path, evals, encodings


def run_main(capsys, *args):
    """``locus ARGS`` in this process: (status, stdout, stderr)."""
    capsys.readouterr()
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


# ------------------------------------------- embeddings csv: carriage returns
def test_write_csv_round_trips_names_that_need_quoting(tmp_path):
    names = ["gpt-4\r", "a\rb", "\r\n", "x\ny", 'q"uote', "c,omma", "NA", "007", " s "]
    X = np.arange(2 * len(names), dtype=np.float64).reshape(-1, 2) / 3
    frame = pd.DataFrame(
        X, index=pd.Index(names, dtype=object, name="model"), columns=["d0", "d1"]
    )
    path = tmp_path / "emb.csv"
    write_csv(frame, path, "EMBEDDINGS")
    read_names, read_X = read_embeddings(path)
    assert read_names.tolist() == names
    np.testing.assert_array_equal(read_X, X)
    # Quoted as text, so a reader cannot take the CR for a line end.
    assert path.read_bytes().startswith(
        b'"model","d0","d1"\n"gpt-4\r",0.0,0.3333333333333333\n"a\rb",'
    )


def test_write_csv_leaves_a_file_without_carriage_returns_as_to_csv_writes_it(
    tmp_path,
):
    frame = pd.DataFrame(
        [[0.5, 1.0]], index=pd.Index(["a,b"], name="model"), columns=["d0", "d1"]
    )
    path = tmp_path / "emb.csv"
    write_csv(frame, path, "EMBEDDINGS")
    assert path.read_bytes() == b'model,d0,d1\n"a,b",0.5,1.0\n'


def test_write_csv_ends_lines_with_newline_on_every_system(tmp_path, monkeypatch):
    """pandas ends to_csv's lines with os.linesep: on Windows the embeddings
    csv was CRLF where every other file of the command is LF."""
    monkeypatch.setattr(os, "linesep", "\r\n")  # as on Windows
    frame = pd.DataFrame(
        [[0.5, 1.0], [2.0, 3.0]],
        index=pd.Index(["a", "b"], name="model"),
        columns=["d0", "d1"],
    )
    path = tmp_path / "emb.csv"
    write_csv(frame, path, "EMBEDDINGS")
    assert path.read_bytes() == b"model,d0,d1\na,0.5,1.0\nb,2.0,3.0\n"


def test_embed_writes_a_csv_that_select_and_neighbors_read_back(
    fitted, tmp_path, capsys
):
    router, evals, _ = fitted
    # Every name but the lone surrogate, which no UTF-8 file can hold.
    kept = evals[evals["model"] != SURROGATE]
    with open(tmp_path / "evals.jsonl", "w", encoding="utf-8") as handle:
        for row in kept.itertuples(index=False):
            record = {"model": row.model, "query": row.query, "score": row.score}
            handle.write(json.dumps(record) + "\n")
    emb = tmp_path / "emb.csv"
    status, _, err = run_main(
        capsys, "embed", router, tmp_path / "evals.jsonl", "-o", emb
    )
    assert status == 0, err
    names, _ = read_embeddings(emb)
    assert names.tolist() == sorted(set(NAMES) - {SURROGATE})

    status, out, err = run_main(
        capsys, "neighbors", emb, "gpt-4\r", "--k", "5", "--json"
    )
    assert status == 0, err
    assert {row["model"] for row in json.loads(out)} == set(names) - {"gpt-4\r"}
    status, out, err = run_main(capsys, "select", emb, "--k", "2", "--json")
    assert status == 0, err


# ------------------------------------------------ serve: lone surrogate names
@pytest.fixture(scope="module")
def client(fitted):
    TestClient = pytest.importorskip("fastapi.testclient").TestClient
    from locus_sklearn.serve import create_app

    with TestClient(create_app(fitted[0]), raise_server_exceptions=False) as client:
        yield client


def test_models_names_a_lone_surrogate_as_a_json_escape(client):
    response = client.get("/models")
    assert response.status_code == 200, response.text
    assert [m["name"] for m in response.json()["models"]] == sorted(NAMES)
    # The ASCII escape of the surrogate: the same JSON value, and valid UTF-8.
    assert '"mod\\udce8le"' in response.content.decode("utf-8")


def test_route_lists_a_lone_surrogate_name_as_a_json_escape(client):
    response = client.post("/route", json={"query": "q00"})
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    assert sorted(result["proba"]) == sorted(NAMES)
    assert SURROGATE in result["proba"]
    assert '"mod\\udce8le":' in response.content.decode("utf-8")


def test_healthz_names_a_router_path_that_is_not_utf8(fitted, tmp_path):
    TestClient = pytest.importorskip("fastapi.testclient").TestClient
    from locus_sklearn.serve import create_app

    # A file name of bytes that are not UTF-8: Python holds it with a surrogate.
    path = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"r\xe9.locus"))
    with open(path, "wb") as handle:
        handle.write(fitted[0].read_bytes())
    with TestClient(create_app(path), raise_server_exceptions=False) as client:
        response = client.get("/healthz")
    assert response.status_code == 200, response.text
    assert response.json()["router"]["path"] == path


# ------------------------------------------------------- Unicode normal forms
HINT = (
    " Did you mean 'cafe\\u0301-7b' (not 'caf\\xe9-7b')? It is the same text in "
    "another Unicode normal form; names are matched exactly."
)


def test_check_model_subset_hints_at_a_name_in_another_normal_form():
    classes = np.array(sorted([NFD, "llama"]), dtype=object)
    with pytest.raises(ValueError) as raised:
        check_model_subset([NFC], classes)
    assert str(raised.value) == (
        f"models has 1 model(s) that are not in the pool: ['{NFC}']; the pool is "
        f"['{NFD}', 'llama']." + HINT
    )
    # No hint for a name that is another text.
    with pytest.raises(ValueError) as raised:
        check_model_subset(["cafe-7b"], classes)
    assert "Did you mean" not in str(raised.value)
    # Exact matching stays.
    assert check_model_subset([NFD], classes).tolist() == [True, False]


def test_predict_nearest_models_and_score_hint_at_another_normal_form(fitted):
    path, evals, encodings = fitted
    router = LocusRouter.load(path, encoder=encodings)
    with pytest.raises(ValueError) as raised:
        router.predict(["q00"], models=[NFC])
    assert str(raised.value).endswith(HINT)
    with pytest.raises(ValueError) as raised:
        nearest_models(router, NFC, k=2)
    assert str(raised.value).endswith(HINT)
    renamed = evals.assign(model=evals["model"].replace({NFD: NFC}))
    with pytest.raises(ValueError) as raised:
        router.score(renamed)
    assert HINT in str(raised.value)


def test_cli_and_serve_hint_at_another_normal_form(fitted, capsys, client):
    router = fitted[0]
    status, _, err = run_main(capsys, "route", router, "q00", "--models", NFC)
    assert status == 1 and HINT.strip() in err, err
    status, _, err = run_main(capsys, "neighbors", router, NFC)
    assert status == 1 and HINT.strip() in err, err
    response = client.post("/route", json={"query": "q00", "models": [NFC]})
    assert response.status_code == 422
    assert response.json()["error"]["message"].endswith(HINT)


def test_gateway_backend_hints_at_another_normal_form(fitted):
    pytest.importorskip("fastapi")
    from locus_sklearn.serve import create_app

    router = fitted[0]
    backend = {"base_url": "http://x"}
    # The only backend, and one of two: each message ends with the hint.
    with pytest.raises(ValueError) as raised:
        create_app(router, gateway={"backends": {NFC: backend}})
    assert str(raised.value).startswith("None of the router's 7 models")
    assert str(raised.value).endswith(HINT)
    with pytest.raises(ValueError) as raised:
        create_app(router, gateway={"backends": {NFC: backend, "llama": backend}})
    assert str(raised.value).startswith(
        "The gateway configuration has backends for 1 model(s) that are not in "
        f"the pool of {str(router)!r}: ['{NFC}']"
    )
    assert str(raised.value).endswith(HINT)
    # Another name: no hint.
    with pytest.raises(ValueError) as raised:
        create_app(router, gateway={"backends": {"cafe-7b": backend, "llama": backend}})
    assert "Did you mean" not in str(raised.value)


def test_litellm_config_hints_at_another_normal_form(fitted):
    pytest.importorskip("yaml")
    from locus_sklearn.serve import litellm_config

    router = fitted[0]
    backend = {"base_url": "http://x"}
    with pytest.raises(ValueError) as raised:
        litellm_config(router, {"backends": {NFC: backend, "llama": backend}})
    assert str(raised.value).startswith(
        "The gateway configuration has backends for 1 model(s) that are not in "
        f"the router's pool: ['{NFC}']"
    )
    assert str(raised.value).endswith(HINT)


# ------------------------------------------------------- files not in UTF-8
def _latin1_evals(n_rows=2000):
    """A csv whose one byte that is not UTF-8 (latin-1 "é") is far beyond
    the first read buffer: (bytes, its offset, its line)."""
    rows = ["model,query,score", *(f"m{i},q{i},1" for i in range(n_rows))]
    head = ("\n".join(rows) + "\n").encode("ascii")
    data = head + "caf\xe9,q,1\n".encode("latin-1")
    # The header and n_rows rows end in a line break each; "caf" precedes it.
    return data, len(head) + 3, n_rows + 2


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_load_evals_names_the_offset_and_line_of_a_byte_that_is_not_utf8(
    tmp_path, suffix
):
    data, offset, line = _latin1_evals()
    assert (offset, line) == (len(data) - 6, 2002)
    path = tmp_path / f"e{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    with pytest.raises(ValueError) as raised:
        load_evals(path)
    assert str(raised.value) == (
        f"path={str(path)!r} is not UTF-8 text: byte 0xe9 at offset {offset}, line "
        f"{line} (invalid continuation byte); save it as UTF-8."
    )


def test_load_evals_jsonl_names_the_offset_and_line_of_a_byte_that_is_not_utf8(
    tmp_path,
):
    lines = [f'{{"model": "m{i}", "query": "q{i}", "score": 1}}\n' for i in range(3000)]
    head = "".join(lines).encode("ascii")
    path = tmp_path / "e.jsonl"
    path.write_bytes(head + b'{"model": "caf\xe9", "query": "q", "score": 1}\n')
    with pytest.raises(ValueError) as raised:
        load_evals(path)
    offset = len(head) + len(b'{"model": "caf')
    assert f"byte 0xe9 at offset {offset}, line 3001 (" in str(raised.value)


def test_a_utf16_file_is_named_as_such(tmp_path, capsys):
    path = tmp_path / "e.csv"
    path.write_bytes("model,query,score\nm,q,1\n".encode("utf-16"))
    with pytest.raises(ValueError, match="starts with a UTF-16 byte-order mark"):
        load_evals(path)
    # The command's own reader of csv files.
    costs = tmp_path / "costs.csv"
    costs.write_bytes("\ufeffmodel,cost\nm,1\n".encode("utf-16-be"))  # big-endian
    with pytest.raises(ValueError) as raised:
        read_costs(costs)
    assert str(raised.value) == (
        f"Could not read the costs file {str(costs)!r}: it is not UTF-8 text: "
        "byte 0xfe at offset 0, line 1 (invalid start byte); it starts with a "
        "UTF-16 byte-order mark, so it is UTF-16 text; save it as UTF-8 csv."
    )


def test_a_costs_file_names_the_offset_and_line_of_a_byte_that_is_not_utf8(
    tmp_path,
):
    rows = "".join(f"m{i},{i}\n" for i in range(5000)).encode("ascii")
    path = tmp_path / "costs.csv"
    path.write_bytes(b"model,cost\n" + rows + b"caf\xe9,1\n")
    with pytest.raises(ValueError) as raised:
        read_costs(path)
    offset = len(b"model,cost\n") + len(rows) + 3
    assert f"byte 0xe9 at offset {offset}, line 5002 (" in str(raised.value)


def test_first_non_utf8_counts_across_chunks():
    from locus_sklearn.datasets._loaders import first_non_utf8

    # "é" (c3 a9) cut between two chunks is UTF-8.
    assert first_non_utf8([b"a\nb\xc3", b"\xa9\n", b"ok\n"]) is None
    # The bad byte in a later chunk, after a character cut between chunks:
    # offset 7 of the whole ("a\nb" 3, "é" 2, "\n" 1, "x" 1), line 3.
    assert first_non_utf8([b"a\nb\xc3", b"\xa9\nx\xff"]) == (
        "byte 0xff at offset 7, line 3 (invalid start byte)"
    )
    # A character cut short by the end: its first byte is the one named.
    assert first_non_utf8([b"ab\n", b"cd\xe6\x97"]) == (
        "byte 0xe6 at offset 5, line 2 (unexpected end of data)"
    )
    # A start byte followed by a byte that does not continue it, across chunks.
    assert first_non_utf8([b"ab\xc3", b"z"]) == (
        "byte 0xc3 at offset 2, line 1 (invalid continuation byte)"
    )


def test_stdin_not_utf8_names_its_offset_and_line(capsys, monkeypatch):
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"q1\nq\xe92\n"), encoding="utf-8")
    )
    from locus_sklearn._cli._io import read_queries

    with pytest.raises(ValueError) as raised:
        read_queries(["-"])
    assert str(raised.value) == (
        "stdin ('-') is not UTF-8 text: byte 0xe9 at offset 4, line 2 (invalid "
        "continuation byte); send UTF-8."
    )


# ----------------------------------------- arguments under a non-UTF-8 locale
def test_text_arguments_are_read_as_utf8_under_the_c_locale(fitted, tmp_path):
    """Under LC_ALL=C without UTF-8 mode, Python decodes arguments as ASCII
    with surrogates; queries and model names are read as UTF-8, as stdin
    is, and a path keeps its bytes (the router's name is not ASCII)."""
    router = tmp_path / "ルーター.locus"
    router.write_bytes(fitted[0].read_bytes())
    # PYTHONIOENCODING (a test runner may set it) would override the locale.
    locale_c = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": None}
    check = "import sys; print(sys.getfilesystemencoding())"
    env = {k: v for k, v in {**os.environ, **locale_c}.items() if v is not None}
    encoding = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, env=env, check=True
    )
    if encoding.stdout.strip().lower() in (b"utf-8", b"utf8"):
        pytest.skip("this Python reads arguments as UTF-8 under LC_ALL=C")
    routed = locus(
        "route", router, QUERY, "--models", f"{JAPANESE},llama", "--json",
        env=locale_c, text=False,
    )  # fmt: skip
    assert routed.returncode == 0, routed.stderr.decode()
    (result,) = json.loads(routed.stdout)
    assert result["query"] == QUERY
    assert result["model"] in (JAPANESE, "llama")
    nearest = locus(
        "neighbors", router, JAPANESE, "--k", "2", "--json", env=locale_c, text=False
    )
    assert nearest.returncode == 0, nearest.stderr.decode()
    assert len(json.loads(nearest.stdout)) == 2


# ------------------------------------------ route tables: terminal columns
def test_shorten_counts_terminal_columns_as_written(monkeypatch):
    from locus_sklearn._cli._io import format_table, shorten

    # 48 columns at most: 45 for the text, 3 for "...". Two columns for
    # each wide character, none for a combining mark.
    assert shorten("a" * 60, 48) == "a" * 45 + "..."
    assert shorten("あ" * 30, 48) == "あ" * 22 + "..."  # 44 + 3 columns
    assert shorten("あ" * 24, 48) == "あ" * 24  # 48 columns: kept
    assert shorten("e\u0301" * 40, 48) == "e\u0301" * 40  # 40 columns
    # On a stdout that cannot encode them, the escapes it writes are
    # measured: 6 columns each, 7 of them fit in 45, and kept whole.
    ascii_out = io.TextIOWrapper(io.BytesIO(), "ascii", "backslashreplace")
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert shorten("日" * 10, 48) == "\\u65e5" * 7 + "..."
    # The model column is 18 wide (3 escapes), the number column 4.
    assert format_table(["model", "p"], [["日本語", "0.5"], ["llama", "0.25"]]) == [
        "model" + " " * 13 + "  " + "   p",
        "-" * 18 + "  " + "----",
        "\\u65e5\\u672c\\u8a9e" + "  " + " 0.5",
        "llama" + " " * 13 + "  " + "0.25",
    ]


def test_route_shortens_a_wide_query_to_48_columns(fitted, tmp_path, capsys):
    router, _, encodings = fitted
    long_query = QUERY * 2  # 48 wide characters: 96 columns
    np.savez(
        tmp_path / "enc.npz",
        queries=np.array([long_query]),
        vectors=encodings["q00"][None],
    )
    status, out, err = run_main(
        capsys, "route", router, long_query, "--encodings", tmp_path / "enc.npz",
        "--models", "llama",
    )  # fmt: skip
    assert status == 0, err
    row = out.splitlines()[2]
    # 22 characters (44 columns) and "...", where 45 characters were kept.
    assert row.startswith(QUERY[:22] + "...  llama")


def test_route_table_aligned_on_an_ascii_stdout(fitted):
    """Under PYTHONIOENCODING=ascii a name is written as escapes, wider
    than its characters: the columns are measured on the escapes."""
    routed = locus(
        "route", fitted[0], "q00", "--models", f"{JAPANESE},llama", "--top", "2",
        env={"PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert routed.returncode == 0, routed.stderr
    lines = routed.stdout.splitlines()
    escaped = "\\u65e5\\u672c\\u8a9e\\u30e2\\u30c7\\u30eb"  # 36 columns
    assert any(escaped in line for line in lines), routed.stdout
    # query 5, rank 4, model 36, P(correct) 10, and three gaps of 2.
    assert [len(line) for line in lines] == [61] * 4, routed.stdout
