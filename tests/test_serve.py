"""The routing service and the gateway, served for real on 127.0.0.1.

Model backends are real HTTP servers on loopback too; each can be told to
answer, fail with a status, stall, or be absent (connection refused).
"""

import asyncio
import contextlib
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
yaml = pytest.importorskip("yaml")

import uvicorn  # noqa: E402
from conftest import TINY, pipe_released_after  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.datasets import make_model_pool  # noqa: E402
from locus_sklearn.inspection import calibrate_cost_weight, fallback_order  # noqa: E402
from locus_sklearn.serve import _cli as serve_cli  # noqa: E402
from locus_sklearn.serve import (  # noqa: E402
    create_app,
    litellm_config,
    load_gateway_config,
)
from locus_sklearn.serve._cli import main as serve_main  # noqa: E402


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pool():
    return make_model_pool(
        n_models=6, n_queries=200, evals_per_model=100, random_state=0
    )


def _fit(pool, evals, seed=0):
    # The plain router: its per-query P(correct) is the network's own, so
    # served answers, cost weights and outage subsets differ between queries
    # whatever a shrinkage choice would be.
    return LocusRouter(
        LocusEmbedder(
            pool.encodings, **{**TINY, "max_epochs": 2, "random_state": seed}
        ),
        shrinkage=None,
    ).fit(evals, model_costs={m: pool.n_params[m] for m in evals["model"].unique()})


@pytest.fixture(scope="module")
def routers(pool):
    """The router served first, and a different one (one model fewer) for reload."""
    first = _fit(pool, pool.evals)
    kept = pool.evals[pool.evals["model"] != pool.evals["model"].max()]
    second = _fit(pool, kept, seed=1)
    return first, second


@pytest.fixture
def router_path(tmp_path, routers):
    path = tmp_path / "router.safetensors"
    routers[0].save(path)
    return path


@pytest.fixture(scope="module")
def queries(pool):
    return sorted(pool.evals["query"].unique())[:24]


def _free_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _dead_port():
    """A loopback port with nothing listening: connecting is refused."""
    sock = _free_socket()
    port = sock.getsockname()[1]
    sock.close()
    return port


@contextlib.contextmanager
def serve(app):
    """Run ``app`` with uvicorn on a free loopback port; yield its base URL."""
    sock = _free_socket()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        assert server.started, "the server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class _QuietServer(ThreadingHTTPServer):
    """The fake backends' server: a stalled backend answers after the gateway
    has timed out and closed the connection, so its write fails; that is the
    case under test, not an error to print."""

    # Room for many concurrent connections (the default backlog is 5).
    request_queue_size = 256

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeBackends:
    """One threaded HTTP server playing an OpenAI-compatible API per model.

    ``modes[model]`` is ``"ok"``, an HTTP status (500, 429, ...),
    ``"stall"`` (answers after ``stall`` seconds), ``"slow"`` (sends its
    headers at once, then its answer in 4 pieces, each after ``pace``
    seconds), ``"hold"`` (answers once ``hold`` requests are in, or after 10
    seconds), ``"nan"`` or ``"huge"`` (200 with a NaN or a 1e400 in its JSON)
    or ``"gzip"`` (answers, streams included, gzip-compressed when the
    request accepts it), ``"gap"`` (a stream whose first chunk comes at once
    and the rest after ``gap`` seconds), ``"surrogate"`` (200 whose answer
    holds a lone surrogate escape), ``"empty"`` (200 with an empty body) or
    ``(status, headers, payload)`` (that answer as it is); ``hits[model]``
    counts requests, ``seen`` keeps (model, headers, body) of each.
    """

    def __init__(self, stall=2.0):
        self.modes = {}
        self.hits = {}
        self.seen = []
        self.stall = stall
        self.pace = 0.2
        self.gap = 1.0
        self.hold = 0
        self.held = threading.Condition()
        self.lock = threading.Lock()
        backends = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                model = self.path.strip("/").split("/")[0]
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with backends.lock:
                    backends.hits[model] = backends.hits.get(model, 0) + 1
                    backends.seen.append(
                        (model, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                mode = backends.modes.get(model, "ok")
                if mode == "stall":
                    time.sleep(backends.stall)
                    mode = "ok"
                if mode == "hold":
                    with backends.held:
                        backends.held.notify_all()
                        backends.held.wait_for(
                            lambda: sum(backends.hits.values()) >= backends.hold, 10
                        )
                    mode = "ok"
                if mode in ("nan", "huge"):
                    number = b"NaN" if mode == "nan" else b"1e400"
                    payload = b'{"id": "x", "choices": [], "usage": {"cost": '
                    payload += number + b"}}"
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if isinstance(mode, tuple):
                    status, headers, payload = mode
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    if status not in (204, 304):
                        self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if mode == "empty":
                    content_type = "text/event-stream" if body.get("stream") else None
                    self.send_response(200)
                    self.send_header("content-type", content_type or "application/json")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if mode == "surrogate":
                    # json.dumps writes the lone surrogate as the escape \ud800.
                    self._send(
                        200,
                        {"id": "x", "choices": [{"message": {"content": "a\ud800b"}}]},
                    )
                    return
                if mode == "gap":
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for i, part in enumerate(("answer ", "from ", model)):
                        if i == 1:
                            time.sleep(backends.gap)
                        event = {"choices": [{"delta": {"content": part}}]}
                        self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                    return
                compress = mode == "gzip" and "gzip" in self.headers.get(
                    "accept-encoding", ""
                )
                if mode not in ("ok", "gzip", "slow"):
                    self._send(mode, {"error": {"message": f"fake {mode}"}})
                    return
                if body.get("stream"):
                    chunks = [
                        {
                            "choices": [{"delta": {"content": part}}],
                            "model": body["model"],
                        }
                        for part in ("answer ", "from ", model)
                    ]
                    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
                    data += "data: [DONE]\n\n"
                    payload = data.encode()
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    if compress:
                        payload = gzip.compress(payload)
                        self.send_header("content-encoding", "gzip")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self._write(payload, mode)
                    return
                self._send(
                    200,
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": f"from {model}",
                                },
                                "finish_reason": "stop",
                            }
                        ],
                    },
                    mode,
                )

            def _chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _send(self, status, obj, mode=None):
                payload = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self._write(payload, mode)

            def _write(self, payload, mode):
                if mode != "slow":
                    self.wfile.write(payload)
                    return
                self.wfile.flush()  # the headers, at once
                step = -(-len(payload) // 4)
                for start in range(0, len(payload), step):
                    time.sleep(backends.pace)
                    self.wfile.write(payload[start : start + step])
                    self.wfile.flush()

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, model):
        return f"http://127.0.0.1:{self.port}/{model}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def backends(monkeypatch):
    # The key variable _gateway's backends name: the service refuses to
    # start with one that is not set.
    monkeypatch.setenv("LOCUS_TEST_KEY", "sk-test")
    fake = FakeBackends()
    yield fake
    fake.close()


def _gateway(backends, models, **fallback):
    return {
        "backends": {
            m: {
                "base_url": backends.url(m),
                "model": f"{m}-chat",
                "api_key_env": "LOCUS_TEST_KEY",
                "timeout": 1.0,
            }
            for m in models
        },
        "fallback": {"max_attempts": 3, "deadline": 5.0, **fallback},
    }


# ------------------------------------------------------------------- routing
def test_route_equals_router_predict_and_proba(router_path, routers, queries):
    router = routers[0]
    with serve(create_app(router_path)) as url:
        answer = httpx.post(
            f"{url}/route", json={"queries": queries, "top_k": 2}
        ).json()
        results = answer["results"]
        assert [r["model"] for r in results] == router.predict(queries).tolist()
        proba = np.array([[r["proba"][m] for m in router.classes_] for r in results])
        np.testing.assert_allclose(proba, router.predict_proba(queries), rtol=1e-6)
        assert all(
            len(r["top"]) == 2 and r["top"][0]["model"] == r["model"] for r in results
        )
        assert answer["router_version"] == 1

        subset = list(router.classes_[:3])
        body = {"queries": queries, "models": subset, "cost_weight": 0.01}
        answer = httpx.post(f"{url}/route", json=body).json()
        router.set_params(cost_weight=0.01)
        try:
            expected = router.predict(queries, models=subset).tolist()
        finally:
            router.set_params(cost_weight=0.0)
        assert [r["model"] for r in answer["results"]] == expected
        assert all(
            set(t["model"] for t in r["top"]) <= set(subset) for r in answer["results"]
        )

        one = httpx.post(
            f"{url}/route", json={"query": queries[0], "return_proba": False}
        ).json()["results"]
        assert len(one) == 1 and "proba" not in one[0]
        assert one[0]["model"] == router.predict(queries[:1])[0]


def test_models_and_healthz(router_path, routers):
    router = routers[0]
    with serve(create_app(router_path)) as url:
        models = httpx.get(f"{url}/models").json()
        assert [m["name"] for m in models["models"]] == router.classes_.tolist()
        assert [m["cost"] for m in models["models"]] == router.model_costs_.tolist()
        assert "embedding" not in models["models"][0]
        with_embeddings = httpx.get(
            f"{url}/models", params={"embeddings": "true"}
        ).json()
        np.testing.assert_allclose(
            [m["embedding"] for m in with_embeddings["models"]],
            router.model_embeddings_,
            rtol=1e-6,
        )
        health = httpx.get(f"{url}/healthz").json()
        assert health["status"] == "ok"
        assert health["router"]["n_models"] == len(router.classes_)
        assert health["router"]["path"] == str(router_path.absolute())


BAD_REQUESTS = [
    (b'{"queries": ["q000"', 400, "body"),
    (b"not json at all", 400, "body"),
    (json.dumps({"queries": 5}), 422, "queries"),
    (json.dumps({"queries": ["q000", 7]}), 422, "queries.1"),
    (json.dumps({"queries": []}), 422, "queries"),
    (json.dumps({"queries": [""]}), 422, "queries.0"),
    (json.dumps({"queries": ["   "]}), 422, "queries.0"),
    (json.dumps({"query": "q000", "queries": ["q001"]}), 422, "body"),
    (json.dumps({"queries": ["q000"], "models": ["no-such-model"]}), 422, "models"),
    (json.dumps({"queries": ["q000"], "models": ["fam0-m00"] * 2}), 422, "models"),
    (json.dumps({"queries": ["q000"], "cost_weight": -1}), 422, "cost_weight"),
    (json.dumps({"queries": ["q000"], "cost_weight": "high"}), 422, "cost_weight"),
    # Strict types: a wrong JSON type is refused, never converted.
    (json.dumps({"queries": ["q000"], "cost_weight": "0.1"}), 422, "cost_weight"),
    (json.dumps({"queries": ["q000"], "cost_weight": True}), 422, "cost_weight"),
    (json.dumps({"queries": ["q000"], "top_k": "2"}), 422, "top_k"),
    (json.dumps({"queries": ["q000"], "top_k": 2.0}), 422, "top_k"),
    (json.dumps({"queries": ["q000"], "return_proba": "no"}), 422, "return_proba"),
    (json.dumps({"queries": ["q000"], "return_proba": 0}), 422, "return_proba"),
    # Finite but so large that the utility overflows: no 500.
    (json.dumps({"queries": ["q000"], "cost_weight": 1e308}), 422, "cost_weight"),
    (json.dumps({"queries": ["q000"], "top_k": 0}), 422, "top_k"),
    (json.dumps({"queries": ["q000"], "path": "/etc/passwd"}), 422, "path"),
    (json.dumps({"queries": ["an unknown id"]}), 422, "queries"),
    (json.dumps({"queries": ["q000"] * 300}), 422, "queries"),
    (json.dumps([1, 2]), 422, "body"),
]


def test_bad_requests_get_4xx_naming_the_field(router_path):
    with serve(create_app(router_path)) as url:
        for content, status, param in BAD_REQUESTS:
            response = httpx.post(
                f"{url}/route",
                content=content,
                headers={"content-type": "application/json"},
            )
            assert response.status_code == status, (content, response.text)
            error = response.json()["error"]
            assert error["param"] == param, (content, error)
            assert error["message"]
        # A wrong type's message names the value it got.
        response = httpx.post(f"{url}/route", json={"query": "q000", "top_k": "2"})
        assert response.json()["error"]["message"] == (
            "top_k: Input should be a valid integer (got '2')"
        )
        # An int is a valid number.
        response = httpx.post(f"{url}/route", json={"query": "q000", "cost_weight": 0})
        assert response.status_code == 200 and response.json()["cost_weight"] == 0.0
        # The process lives on and still routes.
        assert httpx.post(f"{url}/route", json={"query": "q000"}).status_code == 200


def test_huge_bodies_are_refused_unread(router_path):
    with serve(create_app(router_path, max_body_bytes=10_000)) as url:
        big = json.dumps({"queries": ["q000"] * 5000}).encode()
        response = httpx.post(
            f"{url}/route", content=big, headers={"content-type": "application/json"}
        )
        assert response.status_code == 413
        assert response.json()["error"]["param"] == "body"

        def chunks():  # no Content-Length: counted as it arrives
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        response = httpx.post(
            f"{url}/route",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 413
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_concurrent_requests_share_predictor_calls(router_path, routers, queries):
    router = routers[0]
    expected = dict(zip(queries, router.predict(queries), strict=True))
    app = create_app(router_path, batch_window_ms=50, max_batch=64)
    with serve(app) as url:

        async def burst():
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                return await asyncio.gather(
                    *(client.post("/route", json={"query": q}) for q in queries)
                )

        responses = asyncio.run(burst())
        assert all(r.status_code == 200 for r in responses)
        routed = {
            q: r.json()["results"][0]["model"]
            for q, r in zip(queries, responses, strict=True)
        }
        assert routed == expected
        batching = httpx.get(f"{url}/healthz").json()["batching"]
        assert batching["requests"] == len(queries)
        assert batching["queries"] == len(queries)
        # 24 requests arriving together: a handful of predictor calls, not 24.
        assert batching["batches"] <= len(queries) // 4


def test_batcher_without_window_batches_what_arrives_while_computing():
    from locus_sklearn.serve._batching import MicroBatcher

    calls, release = [], threading.Event()

    def fn(context, items):
        calls.append(list(items))
        if len(calls) == 1:
            release.wait(10)  # the first call computes until the test lets go
        return np.asarray(items) * 10

    async def scenario():
        batcher = MicroBatcher(fn, max_batch=4)  # default window: 0
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit([1]))
            while not calls:  # an idle service sends the first at once
                await asyncio.sleep(0.001)
            later = [asyncio.create_task(batcher.submit([i])) for i in range(2, 8)]
            await asyncio.sleep(0.05)
            release.set()
            return await first, await asyncio.gather(*later)
        finally:
            await batcher.stop()

    rows, later = asyncio.run(scenario())
    assert rows.tolist() == [10]
    assert [r.tolist() for r in later] == [[20], [30], [40], [50], [60], [70]]
    # Six arrived while the first computed: two batches of at most four.
    assert calls == [[1], [2, 3, 4, 5], [6, 7]]


def test_a_bad_query_does_not_fail_its_batch(router_path, routers, queries):
    app = create_app(router_path, batch_window_ms=50)
    with serve(app) as url:

        async def burst():
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                bodies = [{"query": q} for q in queries[:6]] + [{"query": "unknown id"}]
                return await asyncio.gather(
                    *(client.post("/route", json=b) for b in bodies)
                )

        *good, bad = asyncio.run(burst())
        assert [r.status_code for r in good] == [200] * 6
        assert bad.status_code == 422 and bad.json()["error"]["param"] == "query"


# -------------------------------------------------------------------- reload
def test_reload_swaps_router_with_no_request_lost(router_path, routers, queries):
    first, second = routers
    failures, answered = [], [[] for _ in range(4)]
    stop = threading.Event()
    with serve(create_app(router_path)) as url:

        def hammer(versions):
            with httpx.Client(base_url=url, timeout=30) as client:
                while not stop.is_set():
                    r = client.post("/route", json={"queries": queries[:4]})
                    if r.status_code != 200:
                        failures.append(r.text)
                    else:
                        versions.append(r.json()["router_version"])

        threads = [threading.Thread(target=hammer, args=(v,)) for v in answered]
        for t in threads:
            t.start()
        try:
            time.sleep(0.3)
            second.save(router_path)
            # A client cannot choose the file: the body is ignored.
            response = httpx.post(
                f"{url}/admin/reload", json={"path": "/etc/passwd"}, timeout=30
            )
            time.sleep(0.3)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert response.status_code == 200, response.text
        info = response.json()
        assert (info["previous_version"], info["version"]) == (1, 2)
        assert info["removed"] == [first.classes_[-1]] and info["added"] == []
        assert not failures
        every = [v for versions in answered for v in versions]
        assert 1 in every and 2 in every
        # Each client sees versions only move forward: once the new router
        # answered, the old one never does again.
        assert all(versions == sorted(versions) for versions in answered)
        answer = httpx.post(f"{url}/route", json={"queries": queries}).json()
        assert answer["router_version"] == 2
        assert [r["model"] for r in answer["results"]] == second.predict(
            queries
        ).tolist()

        # A bad file leaves the new router serving and says why.
        router_path.write_bytes(b"not a router")
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 409
        assert "still serving version 2" in response.json()["error"]["message"]
        answer = httpx.post(f"{url}/route", json={"queries": queries}).json()
        assert answer["router_version"] == 2
        assert httpx.get(f"{url}/healthz").json()["last_reload_error"]


def test_watch_reloads_a_resaved_file(router_path, routers, queries):
    with serve(create_app(router_path, watch_interval=0.05)) as url:
        routers[1].save(router_path)
        _wait_for(lambda: _health(url)["router"]["version"] == 2, "the reload")
        assert _health(url)["router"]["n_models"] == len(routers[1].classes_)


def _repoint(link, target):
    """Point the symlink ``link`` at ``target`` in one step, as ``ln -sfn``
    or a Kubernetes ConfigMap update does."""
    staged = link.with_name(link.name + ".new")
    os.symlink(target, staged)
    os.replace(staged, link)


def test_reload_follows_a_repointed_symlink(tmp_path, routers, queries):
    """The configured path, a symlink, was resolved once at start: a reload
    after ``ln -sfn v2 current`` loaded v1 again, and failed for good once
    v1 was deleted. Now the link is followed at every load."""
    first, second = routers
    first.save(tmp_path / "v1.safetensors")
    second.save(tmp_path / "v2.safetensors")
    link = tmp_path / "current.safetensors"
    os.symlink("v1.safetensors", link)
    with serve(create_app(link)) as url:
        health = httpx.get(f"{url}/healthz").json()
        assert health["router"]["path"] == str(link.absolute())
        assert health["router"]["n_models"] == len(first.classes_)
        _repoint(link, "v2.safetensors")
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 200, response.text
        info = response.json()
        assert info["version"] == 2 and info["n_models"] == len(second.classes_)
        assert info["removed"] == [first.classes_[-1]]
        answer = httpx.post(f"{url}/route", json={"queries": queries}).json()
        assert answer["router_version"] == 2
        assert list(answer["results"][0]["proba"]) == second.classes_.tolist()
        assert [r["model"] for r in answer["results"]] == second.predict(
            queries
        ).tolist()
        # The old target gone (Kubernetes deletes the old data folder): the
        # link names a valid file, so reloading still works.
        os.remove(tmp_path / "v1.safetensors")
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["version"] == 3


def test_watch_notices_a_repointed_symlink(tmp_path, routers):
    """Repointing the link changes what the configured path names even when
    the new target is older than the old one (its mtime went back), or has
    the same bytes and mtime: the stamp holds the target's identity."""
    from locus_sklearn.serve._state import RouterHolder

    first, second = routers
    old, new = tmp_path / "v1.safetensors", tmp_path / "v2.safetensors"
    first.save(old)
    second.save(new)
    stat = os.stat(old)
    os.utime(new, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))  # 1 s older
    link = tmp_path / "current.safetensors"
    os.symlink(old.name, link)

    twin = tmp_path / "v1-copy.safetensors"
    twin.write_bytes(old.read_bytes())
    os.utime(twin, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    holder = RouterHolder(link)
    assert not holder.changed()
    _repoint(link, twin.name)  # same size, same mtime, another file
    assert holder.changed()
    _repoint(link, old.name)
    assert not holder.changed()

    with serve(create_app(link, watch_interval=0.05)) as url:
        _repoint(link, new.name)
        _wait_for(lambda: _health(url)["router"]["version"] == 2, "the reload")
        health = _health(url)
        assert health["router"]["n_models"] == len(second.classes_)
        assert health["last_reload_error"] is None


def _hold_next_call(app):
    """Make the service's next predictor call wait until ``release`` is set;
    ``entered`` is set once it waits. Returns (entered, release)."""
    batcher = app.state.service.batcher
    entered, release = threading.Event(), threading.Event()
    predict = batcher._fn
    held = [False]

    def fn(*args):
        if not held[0]:
            held[0] = True
            entered.set()
            release.wait(20)  # bounded, whatever the test does
        return predict(*args)

    batcher._fn = fn
    return entered, release


def _health(url):
    return httpx.get(f"{url}/healthz").json()


def _wait_for(condition, what):
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _in_background(send):
    """Run ``send()`` in a thread; the returned list gets its result."""
    out = []
    thread = threading.Thread(target=lambda: out.append(send()))
    thread.start()
    return thread, out


def test_requests_in_flight_finish_on_the_router_they_started_with(
    tmp_path, router_path, routers, queries
):
    """A request is checked against the router current when it arrives and
    was answered by the one current when its batch ran: a reload between
    the two made a valid request a 422 blaming the client (a model it named
    dropped, or the costs its cost_weight needs). Now the router it was
    checked against answers it; a request arriving after the reload gets
    the new router. Each request waits behind a predictor call held open,
    so the reload always comes between arrival and batch."""
    first, second = routers
    dropped = first.classes_[-1]
    assert dropped not in second.classes_
    query = queries[0]
    app = create_app(router_path)
    batcher = app.state.service.batcher
    with serve(app) as url:

        def send(body):
            return lambda: httpx.post(f"{url}/route", json=body, timeout=30)

        # 1. A model dropped by the reload.
        entered, release = _hold_next_call(app)
        blocker = _in_background(send({"query": query}))
        _wait_for(entered.is_set, "the held call")
        asked = [dropped, first.classes_[0]]
        early = _in_background(send({"query": query, "models": asked}))
        _wait_for(lambda: batcher.n_calls == 2, "the request to be queued")
        second.save(router_path)
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["removed"] == [dropped]
        late = _in_background(send({"query": query}))
        _wait_for(lambda: batcher.n_calls == 3, "the later request to be queued")
        release.set()
        for thread, _ in (blocker, early, late):
            thread.join(30)
        answer = early[1][0]
        assert answer.status_code == 200, answer.text
        answer = answer.json()
        assert answer["router_version"] == 1
        (result,) = answer["results"]
        assert list(result["proba"]) == first.classes_.tolist()
        np.testing.assert_allclose(
            list(result["proba"].values()), first.predict_proba([query])[0], rtol=1e-5
        )
        assert result["model"] in asked
        answer = late[1][0]
        assert answer.status_code == 200, answer.text
        assert answer.json()["router_version"] == 2
        assert list(answer.json()["results"][0]["proba"]) == second.classes_.tolist()

        # 2. The costs a cost_weight needs, removed by the reload.
        entered, release = _hold_next_call(app)
        blocker = _in_background(send({"query": query}))
        _wait_for(entered.is_set, "the held call")
        early = _in_background(send({"query": query, "cost_weight": 0.05}))
        _wait_for(lambda: batcher.n_calls == 5, "the request to be queued")
        _router_without_costs(second, router_path)
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["has_costs"] is False
        # Arriving after the reload, it is checked against the new router
        # (refused before it is queued, while the predictor is still held).
        late = send({"query": query, "cost_weight": 0.05})()
        assert late.status_code == 422, late.text
        assert "needs model costs" in late.json()["error"]["message"]
        release.set()
        for thread, _ in (blocker, early):
            thread.join(30)
        answer = early[1][0]
        assert answer.status_code == 200, answer.text
        assert answer.json()["router_version"] == 2
        assert answer.json()["cost_weight"] == 0.05


def test_gateway_request_in_flight_finishes_on_its_router(
    tmp_path, router_path, routers, backends
):
    """The gateway's routing too: a request with a cost_weight, accepted by
    a router with costs, is routed by it although a router without costs is
    loaded while it waits for its batch."""
    from locus_sklearn.inspection._cost import _utility
    from locus_sklearn.metrics import route

    first = routers[0]
    query = "q000"
    app = create_app(router_path, gateway=_gateway(backends, first.classes_))
    batcher = app.state.service.batcher
    with serve(app) as url:
        entered, release = _hold_next_call(app)
        blocker = _in_background(lambda: _chat(url, query))
        _wait_for(entered.is_set, "the held call")
        early = _in_background(lambda: _chat(url, query, cost_weight=0.05))
        _wait_for(lambda: batcher.n_calls == 2, "the request to be queued")
        _router_without_costs(first, router_path)
        response = httpx.post(f"{url}/admin/reload", timeout=30)
        assert response.status_code == 200, response.text
        release.set()
        for thread, _ in (blocker, early):
            thread.join(30)
        answer = early[1][0]
        assert answer.status_code == 200, answer.text
        utility = _utility(first.predict_proba([query]), first.model_costs_, 0.05)
        expected = first.classes_[route(utility)[0]]
        assert answer.headers["x-locus-routed-model"] == expected
        # A request arriving now is checked against the router without costs.
        assert _chat(url, query, cost_weight=0.05).status_code == 400


def test_reload_needs_the_admin_token_when_configured(router_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_ADMIN", "s3cret")
    with serve(create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")) as url:
        assert httpx.post(f"{url}/admin/reload").status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert httpx.post(f"{url}/admin/reload", headers=wrong).status_code == 401
        right = {"authorization": "Bearer s3cret"}
        assert httpx.post(f"{url}/admin/reload", headers=right).status_code == 200


# ------------------------------------------------------------------- gateway
def _chat(url, text, **extra):
    body = {"model": "locus", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_gateway_forwards_to_the_routed_model(
    router_path, routers, backends, queries, monkeypatch
):
    router = routers[0]
    monkeypatch.setenv("LOCUS_TEST_KEY", "sk-test")
    gateway = _gateway(backends, router.classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        query = queries[0]
        routed = router.predict([query])[0]
        response = _chat(url, query, temperature=0.2, cost_weight=0.0)
        assert response.status_code == 200, response.text
        data = response.json()
        assert response.headers["x-locus-model"] == routed
        assert data["locus"]["model"] == routed and data["locus"]["failed"] == []
        assert data["choices"][0]["message"]["content"] == f"from {routed}"
        model, headers, body = backends.seen[-1]
        assert model == routed and body["model"] == f"{routed}-chat"
        assert headers["authorization"] == "Bearer sk-test"
        assert body["temperature"] == 0.2 and "cost_weight" not in body

        # Multi-part content: routed by the last user message's text.
        parts = {
            "model": "locus",
            "messages": [
                {"role": "user", "content": "earlier question"},
                {"role": "assistant", "content": "an answer"},
                {"role": "user", "content": [{"type": "text", "text": queries[1]}]},
            ],
        }
        response = httpx.post(f"{url}/v1/chat/completions", json=parts, timeout=30)
        assert response.headers["x-locus-model"] == router.predict(queries[1:2])[0]

        listed = httpx.get(f"{url}/v1/models").json()
        assert [m["id"] for m in listed["data"]] == ["locus", *router.classes_]


@pytest.mark.parametrize("failure", [500, 503, 429, "stall", "refused"])
def test_gateway_falls_back_along_the_fallback_order(
    router_path, routers, backends, queries, failure
):
    router = routers[0]
    query = queries[2]
    routed = router.predict([query])[0]
    gateway = _gateway(backends, router.classes_)
    if failure == "refused":
        gateway["backends"][routed]["base_url"] = f"http://127.0.0.1:{_dead_port()}/v1"
    else:
        backends.modes[routed] = failure
    gateway["backends"][routed]["timeout"] = 0.3
    nearest = fallback_order(router).loc[routed].iloc[0]
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, query)
        assert response.status_code == 200, response.text
        data = response.json()
        assert response.headers["x-locus-model"] == nearest
        assert response.headers["x-locus-routed-model"] == routed
        assert data["locus"]["failed"][0]["model"] == routed
        assert data["choices"][0]["message"]["content"] == f"from {nearest}"


def test_gateway_never_loops_and_keeps_its_deadline(
    router_path, routers, backends, queries
):
    router = routers[0]
    for m in router.classes_:
        backends.modes[m] = 502
    gateway = _gateway(backends, router.classes_, max_attempts=4)
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, queries[0])
        assert response.status_code == 502
        error = response.json()["error"]
        tried = [a["model"] for a in error["attempts"]]
        assert len(tried) == 4 and len(set(tried)) == 4
        assert sum(backends.hits.values()) == 4
        assert all(n == 1 for n in backends.hits.values())

    backends.hits.clear()
    for m in router.classes_:
        backends.modes[m] = "stall"
    gateway = _gateway(backends, router.classes_, max_attempts=6, deadline=0.6)
    with serve(create_app(router_path, gateway=gateway)) as url:
        start = time.monotonic()
        response = _chat(url, queries[0])
        elapsed = time.monotonic() - start
        assert response.status_code == 504
        assert elapsed < 1.5  # the deadline, not 6 attempts x 1 s timeout
        assert sum(backends.hits.values()) <= 2


def test_gateway_streams_and_falls_back_before_the_stream(
    router_path, routers, backends, queries
):
    router = routers[0]
    query = queries[3]
    routed = router.predict([query])[0]
    gateway = _gateway(backends, router.classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        body = {
            "model": "locus",
            "stream": True,
            "messages": [{"role": "user", "content": query}],
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["x-locus-model"] == routed
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        text = "".join(
            json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-1]
        )
        assert text == f"answer from {routed}"

        backends.modes[routed] = 503
        nearest = fallback_order(router).loc[routed].iloc[0]
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            assert r.headers["x-locus-model"] == nearest
            assert f"from {nearest}".split()[-1] in r.read().decode()


def test_gateway_bad_requests(router_path, routers, backends):
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        post = lambda body: httpx.post(f"{url}/v1/chat/completions", json=body)  # noqa: E731
        r = post({"model": "locus", "messages": [{"role": "system", "content": "hi"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        r = post({"model": "gpt-99", "messages": [{"role": "user", "content": "q000"}]})
        assert r.status_code == 404 and r.json()["error"]["param"] == "model"
        # Every invalid request is OpenAI's 400, a bad field included.
        r = post({"model": "locus", "messages": "q000"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = post(
            {
                "model": "locus",
                "messages": [{"role": "user", "content": "q000"}],
                "models": ["nope"],
            }
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "models"
        assert sum(backends.hits.values()) == 0


# ---------------------------------------------------- config, LiteLLM, CLI
def test_gateway_config_errors_name_the_field(tmp_path, router_path, routers):
    with pytest.raises(ValueError, match=r"backends\.m\.base_url"):
        load_gateway_config({"backends": {"m": {"base_url": "not a url"}}})
    with pytest.raises(ValueError, match=r"backends\.m\.timeout"):
        load_gateway_config({"backends": {"m": {"base_url": "http://x", "timeout": 0}}})
    with pytest.raises(ValueError, match=r"fallback\.max_atempts"):
        load_gateway_config(
            {
                "backends": {"m": {"base_url": "http://x"}},
                "fallback": {"max_atempts": 2},
            }
        )
    bad = tmp_path / "gateway.yaml"
    bad.write_text("backends: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_gateway_config(bad)
    with pytest.raises(FileNotFoundError):
        load_gateway_config(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="None of the router's 6 models has a backend"):
        create_app(router_path, gateway={"backends": {"x": {"base_url": "http://x"}}})


def test_litellm_export(routers, backends, tmp_path, router_path, capsys):
    router = routers[0]
    gateway = _gateway(backends, router.classes_[:4], max_attempts=3)
    config = litellm_config(router, gateway)
    assert [m["model_name"] for m in config["model_list"]] == list(router.classes_[:4])
    params = config["model_list"][0]["litellm_params"]
    assert params["model"] == f"openai/{router.classes_[0]}-chat"
    assert params["api_base"] == backends.url(router.classes_[0])
    assert params["api_key"] == "os.environ/LOCUS_TEST_KEY"
    order = fallback_order(router)
    for entry, name in zip(
        config["router_settings"]["fallbacks"], router.classes_[:4], strict=True
    ):
        served = [m for m in order.loc[name] if m in set(router.classes_[:4])]
        assert entry == {name: served[:2]}
    with pytest.raises(ValueError, match="not in the router's pool"):
        litellm_config(router, {"backends": {"nope": {"base_url": "http://x"}}})

    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway))
    assert serve_main(["litellm-config", str(router_path), "--config", str(path)]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == config


def test_litellm_export_keys_urls_and_fallback_counts(routers, backends):
    # A keyless backend got no api_key: LiteLLM then sends it OPENAI_API_KEY.
    # A base_url query string went into api_base, where the request path is
    # appended after it. n_fallbacks refused NumPy ints.
    router = routers[0]
    first, second = router.classes_[:2]
    gateway = {
        "backends": {
            first: {"base_url": backends.url(first)},
            second: {"base_url": backends.url(second), "api_key_env": "LOCUS_TEST_KEY"},
        }
    }
    config = litellm_config(router, gateway, n_fallbacks=np.int64(1))
    keys = [m["litellm_params"]["api_key"] for m in config["model_list"]]
    assert keys == ["no-key", "os.environ/LOCUS_TEST_KEY"]
    assert config["router_settings"]["fallbacks"] == [
        {first: [second]},
        {second: [first]},
    ]
    with pytest.raises(TypeError, match="n_fallbacks must be an int"):
        litellm_config(router, gateway, n_fallbacks=1.0)
    azure = {"backends": {first: {"base_url": "https://h.test/x?api-version=1"}}}
    with pytest.raises(ValueError, match="with a query string, which a LiteLLM"):
        litellm_config(router, azure)


def test_calibrate_command(tmp_path, router_path, routers, pool, capsys):
    router = routers[0]
    evals = pool.evals[
        pool.evals["query"].isin(sorted(pool.evals["query"].unique())[:80])
    ]
    csv = tmp_path / "calibration.csv"
    evals.to_csv(csv, index=False)
    target = float(np.median(router.model_costs_))
    out = tmp_path / "calibrated.safetensors"
    status = serve_main(
        [
            "calibrate",
            str(router_path),
            str(csv),
            "--target-cost",
            str(target),
            "--json",
            "-o",
            str(out),
        ]
    )
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mean_cost"] <= target
    assert LocusRouter.load(out).cost_weight == pytest.approx(result["cost_weight"])

    # --cv: the router's own training evaluations, routed out of fold.
    train_csv = tmp_path / "train.csv"
    pool.evals.to_csv(train_csv, index=False)
    argv = ["calibrate", str(router_path), str(train_csv), "--target-cost"]
    assert serve_main([*argv, str(target), "--cv", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = calibrate_cost_weight(
        LocusRouter.load(router_path), pool.evals, target_cost=target, cv=3
    )
    assert result["cost_weight"] == pytest.approx(expected.cost_weight)
    assert result["n_queries"] == pool.evals["query"].nunique()
    # --cv K needs K >= 2, as its help says: a command-line error.
    with pytest.raises(SystemExit) as exit_info:
        serve_main([*argv, str(target), "--cv", "1"])
    assert exit_info.value.code == 2
    assert "--cv: expected an integer >= 2, got '1'" in capsys.readouterr().err

    text = tmp_path / "queries.txt"
    text.write_text("\n".join(evals["query"].unique()))
    strong = router.classes_[np.argmax(router.model_costs_)]
    assert (
        serve_main(
            [
                "calibrate",
                str(router_path),
                str(text),
                "--target-share",
                "0.1",
                "--models",
                strong,
            ]
        )
        == 0
    )
    assert "share" in capsys.readouterr().out
    assert (
        serve_main(["calibrate", str(router_path), str(text), "--min-accuracy", "0.5"])
        == 1
    )
    assert "--min-accuracy needs scored" in capsys.readouterr().err
    status = serve_main(
        ["calibrate", str(router_path), str(text), "--target-share", "0.1"]
    )
    assert status == 2
    assert "--target-share needs --models" in capsys.readouterr().err


# -------------------------------------------------------------- onnx encoder
def test_onnx_encoder_backend_serves_the_same_answers(tmp_path, pool):
    """A router of text queries served with its encoder in ONNX Runtime: the
    answers of the PyTorch encoder, to float rounding."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    texts = {
        q: f"Question {i}: what is {i} times {i + 3}?"
        for i, q in enumerate(sorted(pool.evals["query"].unique())[:60])
    }
    evals = pool.evals[pool.evals["query"].isin(texts)].replace({"query": texts})
    router = LocusRouter(
        LocusEmbedder(**{**TINY, "max_epochs": 1, "random_state": 0}), shrinkage=None
    ).fit(evals)
    path = tmp_path / "text_router.safetensors"
    router.save(path)
    queries = ["What is 7 times 10?", "Question 3: what is 3 times 6?"]
    with serve(create_app(path, encoder_backend="onnx")) as url:
        results = httpx.post(f"{url}/route", json={"queries": queries}).json()[
            "results"
        ]
        health = httpx.get(f"{url}/healthz").json()
    proba = np.array([[r["proba"][m] for m in router.classes_] for r in results])
    np.testing.assert_allclose(proba, router.predict_proba(queries), atol=1e-5)
    assert health["status"] == "ok"


def test_onnx_encoder_backend_refused_for_precomputed_vectors(router_path):
    pytest.importorskip("onnxruntime")
    with pytest.raises(
        ValueError, match=r"backend='onnx' runs a sentence-transformers"
    ):
        create_app(router_path, encoder_backend="onnx")


def test_serve_command_passes_the_encoder_backend(router_path, monkeypatch):
    from locus_sklearn.serve import _app

    seen = {}
    monkeypatch.setattr(_app, "create_app", lambda path, **kw: seen.update(kw))
    _captured_app(monkeypatch)
    assert serve_main(["serve", str(router_path)]) == 0
    assert seen["encoder_backend"] == "torch"
    assert serve_main(["serve", str(router_path), "--encoder-backend", "onnx"]) == 0
    assert seen["encoder_backend"] == "onnx"
    with pytest.raises(SystemExit):
        serve_main(["serve", str(router_path), "--encoder-backend", "tensorrt"])


# ------------------------------------------------- loading and configuration
def _strict_loads(text):
    """``json.loads`` that refuses NaN and Infinity, which are not JSON."""

    def refuse(name):
        raise ValueError(f"{name} in the output")

    return json.loads(text, parse_constant=refuse)


def _captured_app(monkeypatch):
    """Make ``locus serve`` hand its app here instead of opening its port and
    running uvicorn."""
    seen = {}

    def run(server, sockets):
        import torch

        seen["app"], seen["threads"] = server.config.app, torch.get_num_threads()
        seen["config"] = server.config

    monkeypatch.setattr(serve_cli, "_listen", lambda host, port: [])
    monkeypatch.setattr(serve_cli, "_run_server", run)
    return seen


def _npz(path, mapping):
    keys = list(mapping)
    np.savez(
        path,
        queries=np.array(keys, dtype=str),
        vectors=np.stack([np.asarray(mapping[k], dtype=np.float32) for k in keys]),
    )
    return path


def test_serve_a_router_saved_without_query_text(
    tmp_path, routers, queries, monkeypatch
):
    """A file saved with include_query_text=False stores SHA-256 ids, not
    queries: the service validates it on stored encodings and serves it with
    the mapping passed again (create_app and locus serve --encodings)."""
    router = routers[0]
    mapping = dict(router.embedder_.encoder)
    path = tmp_path / "hashed.safetensors"
    router.save(path, include_query_text=False)
    with serve(create_app(path, encoder=mapping)) as url:
        answer = httpx.post(f"{url}/route", json={"queries": queries[:4]}).json()
    assert [r["model"] for r in answer["results"]] == router.predict(
        queries[:4]
    ).tolist()

    seen = _captured_app(monkeypatch)
    npz = _npz(tmp_path / "enc.npz", mapping)
    assert serve_main(["serve", str(path), "--encodings", str(npz)]) == 0
    with serve(seen["app"]) as url:
        response = httpx.post(f"{url}/route", json={"query": queries[0]})
    assert response.status_code == 200, response.text


def test_encodings_add_to_the_saved_ones(
    tmp_path, router_path, routers, pool, queries, monkeypatch, capsys
):
    """--encodings adds to the encodings a router saved (docs/cli.rst), for
    serve, calibrate and litellm-config as for locus route."""
    from locus_sklearn._cli._commands import _encoder_arg
    from locus_sklearn.serve._cli import _load_router, build_parser

    router = routers[0]
    npz = _npz(tmp_path / "one.npz", {"brand-new": pool.encodings[queries[0]]})

    seen = _captured_app(monkeypatch)
    assert serve_main(["serve", str(router_path), "--encodings", str(npz)]) == 0
    with serve(seen["app"]) as url:
        for query in ("brand-new", queries[1]):  # the new id, and a saved one
            response = httpx.post(f"{url}/route", json={"query": query})
            assert response.status_code == 200, (query, response.text)
        # The added vectors stay added after a reload.
        response = httpx.post(f"{url}/admin/reload")
        assert response.status_code == 200, response.text
        response = httpx.post(f"{url}/route", json={"query": "brand-new"})
        assert response.status_code == 200, response.text

    csv = tmp_path / "calibration.csv"
    pool.evals[pool.evals["query"].isin(queries)].to_csv(csv, index=False)
    target = str(float(np.median(router.model_costs_)))
    argv = ["calibrate", str(router_path), str(csv), "--target-cost", target]
    assert serve_main([*argv, "--encodings", str(npz), "--json"]) == 0, (
        capsys.readouterr().err
    )
    assert _strict_loads(capsys.readouterr().out)["n_queries"] == len(queries)

    args = build_parser().parse_args(
        ["litellm-config", str(router_path), "--config", "g.yaml"]
        + ["--encodings", str(npz)]
    )
    encoder = _load_router(args, _encoder_arg(args)).embedder_.encoder
    assert "brand-new" in encoder and set(router.embedder_.encoder) <= set(encoder)

    # Not an npz archive: the message names the file.
    text = tmp_path / "enc.npz"
    text.write_text("queries,vectors\n")
    assert serve_main([*argv, "--encodings", str(text)]) == 1
    err = capsys.readouterr().err
    assert f"{str(text)!r} is not a valid encodings file" in err, err


@pytest.mark.parametrize(
    "content, field",
    [
        ("cost_weight: .inf\n", "cost_weight"),
        ("cost_weight: .nan\n", "cost_weight"),
        ("cost_weight: '0.5'\n", "cost_weight"),
        ("cost_weight: true\n", "cost_weight"),
        ("fallback:\n  max_attempts: true\n", "fallback.max_attempts"),
        ("fallback:\n  deadline: .inf\n", "fallback.deadline"),
    ],
)
def test_gateway_config_refuses_non_finite_and_wrong_types(tmp_path, content, field):
    """Refused at load, naming the field and the value: never converted, and
    never accepted to fail every request later."""
    path = tmp_path / "gateway.yaml"
    path.write_text("backends:\n  m:\n    base_url: http://127.0.0.1:9/v1\n" + content)
    with pytest.raises(ValueError, match=rf"{str(path)!r}: {field}: .*\(got "):
        load_gateway_config(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "gateway.yaml",
            "backends:\n  m:\n    base_url: http://127.0.0.1:9/v1\n"
            "  m:\n    base_url: http://127.0.0.1:8/v1\n",
            r"(?s)not valid YAML: .*found the key 'm' a second time.*line 4",
        ),
        (
            "gateway.yaml",
            "cost_weight: 0\nbackends:\n  m:\n    base_url: http://127.0.0.1:9/v1\n"
            "cost_weight: 0.5\n",
            r"(?s)found the key 'cost_weight' a second time.*line 5",
        ),
        (
            "gateway.json",
            '{"backends": {"m": {"base_url": "http://127.0.0.1:9/v1"}}, '
            '"backends": {"n": {"base_url": "http://127.0.0.1:8/v1"}}}',
            r"not valid JSON \(the key 'backends' appears twice in one object\)",
        ),
    ],
)
def test_gateway_config_refuses_a_repeated_key(tmp_path, name, content, message):
    # A parser keeps a repeated key's last value: the first backend (or the
    # first cost_weight) would be dropped without a word.
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_gateway_config(path)


def test_gateway_config_backend_types_are_strict():
    backend = {"base_url": "http://127.0.0.1:9/v1"}
    for timeout in (True, "30"):
        with pytest.raises(ValueError, match=r"backends\.m\.timeout: .*\(got "):
            load_gateway_config({"backends": {"m": {**backend, "timeout": timeout}}})
    # An int is a valid number.
    config = load_gateway_config(
        {"backends": {"m": {**backend, "timeout": 30}}, "cost_weight": 0}
    )
    assert config.backends["m"].timeout == 30.0 and config.cost_weight == 0.0


def test_gateway_config_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match=rf"{str(path)!r} is not UTF-8 text"):
        load_gateway_config(path)


def _router_without_costs(router, path):
    import copy

    plain = copy.deepcopy(router)
    plain.model_costs_ = None
    plain.save(path)
    return path


def test_gateway_config_checked_against_the_router(
    tmp_path, router_path, routers, backends
):
    """A configuration that does not fit the router is refused at start (and
    a reloaded router that does not fit it is refused, the old one serving)."""
    router = routers[0]
    gateway = _gateway(backends, router.classes_)
    typo = {**gateway, "backends": {**gateway["backends"], "gpt-4-typo": {}}}
    typo["backends"]["gpt-4-typo"] = {"base_url": backends.url("x")}
    with pytest.raises(ValueError, match=r"not in the pool .*\['gpt-4-typo'\]"):
        create_app(router_path, gateway=typo)

    plain = _router_without_costs(router, tmp_path / "plain.safetensors")
    with pytest.raises(ValueError, match=r"cost_weight=0.5 needs model costs"):
        create_app(plain, gateway={**gateway, "cost_weight": 0.5})
    create_app(plain, gateway={**gateway, "cost_weight": 0})  # fine without costs
    with pytest.raises(ValueError, match=r"cost_weight=1e\+308 is too large"):
        create_app(router_path, gateway={**gateway, "cost_weight": 1e308})

    with serve(create_app(router_path, gateway=gateway)) as url:
        routers[1].save(router_path)  # one model fewer: its backend is unused
        response = httpx.post(f"{url}/admin/reload")
        assert response.status_code == 409
        message = response.json()["error"]["message"]
        assert "still serving version 1" in message
        assert repr(router.classes_[-1]) in message
        assert httpx.get(f"{url}/healthz").json()["router"]["version"] == 1
        assert _chat(url, "q000").status_code == 200


def test_load_errors_name_the_configured_file(tmp_path, router_path):
    """Not the private copy the service loads from."""
    data = router_path.read_bytes()
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as info:
        create_app(broken)
    assert repr(str(broken.absolute())) in str(info.value)
    assert "locus-serve-" not in str(info.value)

    with serve(create_app(router_path)) as url:
        router_path.write_bytes(data[: len(data) // 2])
        response = httpx.post(f"{url}/admin/reload")
        message = response.json()["error"]["message"]
        assert response.status_code == 409
        assert repr(str(router_path.absolute())) in message, message
        assert "locus-serve-" not in message
        error = httpx.get(f"{url}/healthz").json()["last_reload_error"]
        assert "locus-serve-" not in error and str(router_path.absolute()) in error


@pytest.mark.parametrize(
    "option, value, exception",
    [
        ("max_body_bytes", 0, ValueError),
        ("max_body_bytes", -1, ValueError),
        ("max_queries", 0, ValueError),
        ("max_queries", -1, ValueError),
        ("max_batch", 0, ValueError),
        ("max_batch", -3, ValueError),
        ("max_batch", "64", TypeError),
        ("max_batch", True, TypeError),
        ("max_query_chars", 0, ValueError),
        ("batch_window_ms", -5, ValueError),
        ("batch_window_ms", float("nan"), ValueError),
        ("batch_window_ms", 10_000.5, ValueError),
        ("watch_interval", -1, ValueError),
        ("watch_interval", 0, ValueError),
        ("watch_interval", float("inf"), ValueError),
        ("encoder_backend", "bogus", ValueError),
    ],
)
def test_create_app_checks_its_parameters(router_path, option, value, exception):
    with pytest.raises(exception, match=rf"^{option} must be .*; got {value!r}"):
        create_app(router_path, **{option: value})


@pytest.mark.parametrize("option", ["--watch", "--keep-alive"])
@pytest.mark.parametrize("value", ["0", "-1", "-0", "nan", "inf", "1e400"])
def test_watch_must_be_positive(router_path, capsys, monkeypatch, option, value):
    """The bound these options take (> 0), not nonnegative_float's >= 0."""
    _captured_app(monkeypatch)  # never serve for real, whatever happens
    with pytest.raises(SystemExit) as info:
        serve_main(["serve", str(router_path), f"{option}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{option}: expected a finite number > 0, got {value!r}" in err, err


def test_positive_float_messages():
    import argparse

    from locus_sklearn._cli._types import positive_float

    assert positive_float("0.25") == 0.25
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a number > 0, "):
        positive_float("soon")


def test_threads_before_serve_are_kept(router_path, monkeypatch):
    """``locus --threads N serve`` runs the server with N threads."""
    import torch

    from locus_sklearn._cli import main as locus_main

    seen = _captured_app(monkeypatch)
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    assert locus_main(["--threads", str(target), "serve", str(router_path)]) == 0
    assert seen["threads"] == target
    assert torch.get_num_threads() == before
    assert serve_main(["serve", str(router_path), "--threads", str(target)]) == 0
    assert seen["threads"] == target


@pytest.mark.parametrize("where", ["before", "after"])
def test_serve_threads_is_capped_as_a_usage_error(router_path, capsys, where):
    # torch failed on it: "Overflow when unpacking long long", status 1.
    args = ["serve", str(router_path)]
    option = ["--threads", "99999999999999999999"]
    args = option + args if where == "before" else args + option
    with pytest.raises(SystemExit) as exc:
        serve_main(args)
    assert exc.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_gateway_reports_the_effective_cost_weight(router_path, routers, backends):
    gateway = {**_gateway(backends, routers[0].classes_), "cost_weight": 0.01}
    with serve(create_app(router_path, gateway=gateway)) as url:
        assert httpx.post(f"{url}/route", json={"query": "q000"}).json()[
            "cost_weight"
        ] == pytest.approx(0.01)
        health = httpx.get(f"{url}/healthz").json()
        assert health["router"]["cost_weight"] == pytest.approx(0.01)
        models = httpx.get(f"{url}/models").json()
        assert models["cost_weight"] == pytest.approx(0.01)


def test_gateway_refuses_nan_in_the_request(router_path, routers, backends):
    """NaN and Infinity are not JSON: 400 before any routing, not a 500 when
    forwarding after it."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        for constant in (b"NaN", b"Infinity", b"-Infinity"):
            body = (
                b'{"model": "locus", "messages": [{"role": "user", "content": '
                b'"q000"}], "temperature": ' + constant + b"}"
            )
            response = httpx.post(
                f"{url}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "body" and "not valid JSON" in error["message"]
            assert constant.decode().lstrip("-") in error["message"]
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
    assert sum(backends.hits.values()) == 0


@pytest.mark.parametrize("mode", ["nan", "huge"])
def test_gateway_backend_answer_with_nan_is_a_failed_attempt(
    router_path, routers, backends, queries, mode
):
    """A 200 answer holding NaN, or 1e400 (valid JSON syntax that Python reads
    as infinity), is a failed attempt that falls back, not a 500."""
    router = routers[0]
    query = queries[0]
    routed = router.predict([query])[0]
    backends.modes[routed] = mode
    gateway = _gateway(backends, router.classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, query)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["locus"]["failed"] == [
        {"model": routed, "error": "invalid JSON answer"}
    ]
    assert data["locus"]["model"] == fallback_order(router).loc[routed].iloc[0]


def test_gateway_stream_must_be_a_boolean(router_path, routers, backends):
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, "q000", stream="yes")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "stream"
    assert sum(backends.hits.values()) == 0


def test_gateway_huge_cost_weight_is_a_400(router_path, routers, backends):
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, "q000", cost_weight=1e308)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "cost_weight"
    assert sum(backends.hits.values()) == 0


def test_gateway_names_the_over_long_message_by_its_index(
    router_path, routers, backends
):
    gateway = _gateway(backends, routers[0].classes_)
    messages = [
        {"role": "user", "content": "q000"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": "x" * 60},
    ]
    app = create_app(router_path, gateway=gateway, max_query_chars=50)
    with serve(app) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "locus", "messages": messages},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages.2", error
    assert error["message"].startswith("messages[2] has 60 characters")


def test_calibrate_json_has_no_infinity(tmp_path, router_path, pool, capsys):
    """The cheapest λ keeping accuracy >= 0 has an unbounded interval: its
    upper end is null in the one JSON document printed."""
    csv = tmp_path / "calibration.csv"
    evals = pool.evals[
        pool.evals["query"].isin(sorted(pool.evals["query"].unique())[:80])
    ]
    evals.to_csv(csv, index=False)
    argv = ["calibrate", str(router_path), str(csv), "--min-accuracy", "0"]
    assert serve_main([*argv, "--json"]) == 0
    result = _strict_loads(capsys.readouterr().out)
    assert result["upper"] is None and result["lower"] >= 0
    assert result["share"] is None  # not a share target


def test_missing_router_is_a_file_error_under_both_commands(tmp_path):
    """``python -m locus_sklearn.serve`` fails as ``locus`` does: exit 3."""
    from locus_sklearn._cli import main as locus_main

    missing = tmp_path / "missing.safetensors"
    assert serve_main(["serve", str(missing)]) == 3
    assert locus_main(["serve", str(missing)]) == 3
    result = subprocess.run(
        [sys.executable, "-m", "locus_sklearn.serve", "serve", "missing.safetensors"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("locus serve: error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_litellm_negative_fallbacks_names_the_option(
    tmp_path, router_path, routers, capsys
):
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text(
        yaml.safe_dump({"backends": {routers[0].classes_[0]: {"base_url": "http://x"}}})
    )
    argv = ["litellm-config", str(router_path), "--config", str(gateway)]
    with pytest.raises(SystemExit) as info:
        serve_main([*argv, "--fallbacks", "-1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--fallbacks: expected an integer >= 0, got '-1'" in err, err
    assert serve_main([*argv, "--fallbacks", "0"]) == 0


def test_calibrate_output_checked_before_work(
    tmp_path, router_path, pool, monkeypatch, capsys
):
    """An unwritable -o fails at once (exit 3), not after calibrating; and
    calibrate takes --threads like every locus command."""
    import locus_sklearn.inspection

    def never(*args, **kwargs):
        raise AssertionError("calibrated before checking -o")

    monkeypatch.setattr(locus_sklearn.inspection, "calibrate_cost_weight", never)
    csv = tmp_path / "calibration.csv"
    pool.evals.head(50).to_csv(csv, index=False)
    out = tmp_path / "no" / "dir" / "x.safetensors"
    argv = ["calibrate", str(router_path), str(csv), "--target-cost", "1"]
    assert serve_main([*argv, "--threads", "1", "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert f"cannot write ROUTER_OUT {str(out)!r}" in err, err


# ------------------------------------------- reading bodies: one rule for both
def _post_raw(url, path, content, content_type="application/json"):
    headers = {} if content_type is None else {"content-type": content_type}
    return httpx.post(f"{url}{path}", content=content, headers=headers, timeout=30)


def _assert_body_error(response, status, *contains):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "body"
    for text in contains:
        assert text in error["message"], error["message"]


def test_gateway_refuses_out_of_range_numbers(router_path, routers, backends):
    """1e400 is valid JSON syntax that Python reads as infinity: a 400 before
    any routing, not a 500 when forwarding it (a backend answering with one:
    test_gateway_backend_answer_with_nan_is_a_failed_attempt)."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        for number in (b"1e400", b"-1e400"):
            body = (
                b'{"model": "locus", "messages": [{"role": "user", "content": '
                b'"q000"}], "temperature": ' + number + b"}"
            )
            response = _post_raw(url, "/v1/chat/completions", body)
            _assert_body_error(response, 400, "not valid JSON", number.decode())
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
        assert sum(backends.hits.values()) == 0


def test_repeated_keys_are_refused_naming_the_key(router_path, routers, backends):
    """A key given twice is not resolved silently to its last value, at any
    depth, on /route and the gateway alike."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        for content, key in [
            (b'{"query": "q000", "query": "q002"}', "query"),
            (b'{"queries": ["q000"], "queries": ["q002", "q004"]}', "queries"),
            (
                b'{"query": "q000", "models": ["fam0-m00"], "models": ["fam4-m05"]}',
                "models",
            ),
        ]:
            response = _post_raw(url, "/route", content)
            _assert_body_error(response, 400, f"the key {key!r} appears twice")
        for content, key in [
            (
                b'{"model": "nope", "model": "locus", '
                b'"messages": [{"role": "user", "content": "q000"}]}',
                "model",
            ),
            (  # nested: inside a message
                b'{"model": "locus", "messages": [{"role": "user", '
                b'"content": "q001", "content": "q000"}]}',
                "content",
            ),
        ]:
            response = _post_raw(url, "/v1/chat/completions", content)
            _assert_body_error(response, 400, f"the key {key!r} appears twice")
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
    assert sum(backends.hits.values()) == 0


def test_gateway_relays_a_gzipped_stream_decoded(
    router_path, routers, backends, queries
):
    """A backend that gzips its event stream: the client gets the events, not
    compressed bytes without a content-encoding to say so."""
    router = routers[0]
    query = queries[3]
    routed = router.predict([query])[0]
    backends.modes[routed] = "gzip"
    gateway = _gateway(backends, router.classes_)
    body = {
        "model": "locus",
        "stream": True,
        "messages": [{"role": "user", "content": query}],
    }
    with serve(create_app(router_path, gateway=gateway)) as url:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["x-locus-model"] == routed
            assert "content-encoding" not in r.headers
            raw = b"".join(r.iter_raw())
    assert "gzip" in backends.seen[-1][1]["accept-encoding"]
    events = [line for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    text = "".join(
        json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-1]
    )
    assert text == f"answer from {routed}"


def test_serve_on_a_port_in_use_is_one_error_line(router_path, capsys):
    """No "serving" line, then uvicorn's silent exit: one error line naming
    the address, with the status of a port that cannot be opened (3)."""
    taken = _free_socket()
    taken.listen()
    port = taken.getsockname()[1]
    try:
        argv = ["serve", str(router_path), "--host", "127.0.0.1", "--port", str(port)]
        status = serve_main([*argv, "--log-level", "critical"])
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert status == 3, err
    assert err.startswith(f"locus serve: error: cannot listen on 127.0.0.1:{port}: ")
    assert len(err.strip().splitlines()) == 1 and "serving" not in err, err


def test_a_body_without_a_json_content_type_is_a_415(router_path, routers, backends):
    """Not pydantic's "Input should be a valid dictionary" 422: the message
    says what to send. Any application/*+json type is JSON."""
    gateway = _gateway(backends, routers[0].classes_)
    chat = json.dumps(
        {"model": "locus", "messages": [{"role": "user", "content": "q000"}]}
    ).encode()
    with serve(create_app(router_path, gateway=gateway)) as url:
        for path, content in [
            ("/route", b'{"query": "q000"}'),
            ("/v1/chat/completions", chat),
        ]:
            for content_type in (
                "text/plain",
                None,
                "application/x-www-form-urlencoded",
            ):
                response = _post_raw(url, path, content, content_type)
                _assert_body_error(
                    response,
                    415,
                    "Content-Type: application/json",
                    str(content_type or "no Content-Type"),
                )
        response = _post_raw(
            url, "/route", b'{"query": "q000"}', "application/vnd.api+json"
        )
        assert response.status_code == 200, response.text
        # Without a body, what is missing is the body, as before.
        response = httpx.post(f"{url}/route")
        assert response.status_code == 422, response.text
    assert sum(backends.hits.values()) == 0


def test_a_body_not_utf8_gets_the_documented_error_shape(
    router_path, routers, backends
):
    gateway = _gateway(backends, routers[0].classes_)
    latin1 = '{"query": "q000é"}'.encode("latin-1")
    chat = '{"model": "locus", "messages": [{"role": "user", "content": "é"}]}'
    with serve(create_app(router_path, gateway=gateway)) as url:
        for path, content, content_type in [
            ("/route", b'{"query": "\xff"}', "application/json"),
            ("/route", latin1, "application/json; charset=latin-1"),
            ("/v1/chat/completions", chat.encode("latin-1"), "application/json"),
        ]:
            response = _post_raw(url, path, content, content_type)
            _assert_body_error(response, 400, "not UTF-8", "UTF-8")
    assert sum(backends.hits.values()) == 0


def test_route_statuses_follow_the_documented_rule(router_path, routers, backends):
    """413 only for a body over the size limit; NaN a 400 on /route as on the
    gateway; a single blank query named ``query`` as an empty one is."""
    gateway = _gateway(backends, routers[0].classes_)
    app = create_app(router_path, gateway=gateway, max_queries=4)
    with serve(app) as url:
        for n in (5, 41):
            response = httpx.post(f"{url}/route", json={"queries": ["q000"] * n})
            assert response.status_code == 422, (n, response.text)
            error = response.json()["error"]
            assert error["param"] == "queries"
            assert (
                error["message"] == f"queries has {n} queries; at most 4 per request."
            )
        nan = b'{"query": "q000", "cost_weight": NaN}'
        _assert_body_error(_post_raw(url, "/route", nan), 400, "NaN")
        chat = (
            b'{"model": "locus", "messages": [{"role": "user", "content": "q000"}], '
            b'"cost_weight": NaN}'
        )
        _assert_body_error(_post_raw(url, "/v1/chat/completions", chat), 400, "NaN")
        for query in ("", "   "):
            response = httpx.post(f"{url}/route", json={"query": query})
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["param"] == "query", error
            assert error["message"] == (
                f"query is empty or blank (got {query!r}); send some text."
            )
        response = httpx.post(f"{url}/route", json={"queries": ["q000", " "]})
        assert response.json()["error"]["param"] == "queries.1"
        assert response.json()["error"]["message"].startswith("queries[1] is empty")
    assert sum(backends.hits.values()) == 0


# ------------------------------------------- attempts, keys, limits, config
def _stream(url, body):
    """The answer's headers and the text of its events."""
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        events = [
            line[6:] for line in response.iter_lines() if line.startswith("data: ")
        ]
    deltas = (json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
    return response, "".join(deltas)


def test_backend_timeout_bounds_the_whole_attempt(
    router_path, routers, backends, queries
):
    """``timeout`` is per attempt: a backend that sends its headers at once
    and then its body slowly (each piece within the timeout of the last) is
    left at the timeout and the request falls back; for a stream, the first
    chunk must come within it, and a stream that began is relayed whole."""
    router = routers[0]
    query = queries[2]
    routed = router.predict([query])[0]
    nearest = fallback_order(router).loc[routed].iloc[0]
    backends.modes[routed] = "slow"  # 4 pieces, 0.2 s apart: 0.8 s
    gateway = _gateway(backends, router.classes_)
    gateway["backends"][routed]["timeout"] = 0.3
    body = {"model": "locus", "messages": [{"role": "user", "content": query}]}
    with serve(create_app(router_path, gateway=gateway)) as url:
        start = time.monotonic()
        response = _chat(url, query)
        elapsed = time.monotonic() - start
        assert response.status_code == 200, response.text
        assert response.headers["x-locus-model"] == nearest
        assert response.json()["locus"]["failed"] == [
            {"model": routed, "error": "timeout"}
        ]
        assert elapsed < 0.75  # not the whole slow answer

        backends.pace = 0.5  # the stream's first chunk after the timeout
        response, text = _stream(url, {**body, "stream": True})
        assert response.headers["x-locus-model"] == nearest
        assert text == f"answer from {nearest}"

    # Begun within its timeout, a stream runs past the deadline to its end
    # (first chunk at 0.2 s against a 0.6 s timeout: room for a slow runner;
    # 4 pieces end at 0.8 s, past the 0.6 s deadline).
    backends.pace = 0.2
    gateway["backends"][routed]["timeout"] = 0.6
    gateway["fallback"]["deadline"] = 0.6
    with serve(create_app(router_path, gateway=gateway)) as url:
        response, text = _stream(url, {**body, "stream": True})
    assert response.headers["x-locus-model"] == routed
    assert text == f"answer from {routed}"


def test_gateway_has_no_cap_on_backend_connections(router_path, routers, backends):
    """httpx's default pool holds 100 connections over all backends: the
    101st concurrent request waited for one and failed as a backend timeout."""
    model = routers[0].classes_[0]
    n = 101
    backends.modes[model] = "hold"  # no answer until all 101 are in
    backends.hold = n
    gateway = _gateway(backends, routers[0].classes_)
    gateway["backends"][model]["timeout"] = 6.0
    gateway["fallback"]["deadline"] = 8.0
    body = {"model": model, "messages": [{"role": "user", "content": "q000"}]}

    async def burst(url):
        limits = httpx.Limits(max_connections=2 * n)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            return await asyncio.gather(
                *(
                    client.post(f"{url}/v1/chat/completions", json=body)
                    for _ in range(n)
                )
            )

    with serve(create_app(router_path, gateway=gateway)) as url:
        responses = asyncio.run(burst(url))
    assert [r.status_code for r in responses] == [200] * n
    assert {r.headers["x-locus-attempts"] for r in responses} == {"1"}
    assert backends.hits == {model: n}


def test_no_free_connection_is_the_gateway_overload(router_path, routers, backends):
    """A PoolTimeout is the gateway's own overload (503), not a failure of
    the backend: no fallback attempt is spent on it."""

    def no_connection(request):
        raise httpx.PoolTimeout("no free connection", request=request)

    gateway = _gateway(backends, routers[0].classes_)
    app = create_app(router_path, gateway=gateway)
    service = app.state.service
    with serve(app) as url:
        own = service.client
        service.client = httpx.AsyncClient(transport=httpx.MockTransport(no_connection))
        try:
            response = _chat(url, "q000")
        finally:
            service.client = own
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and "overloaded" in error["message"]
    assert "attempts" not in error


def test_an_unset_key_variable_is_refused_at_start(
    router_path, routers, backends, monkeypatch
):
    """Not requests sent without Authorization, whose 401 would reach the
    client as if its own key were wrong."""
    gateway = _gateway(backends, routers[0].classes_)
    name = routers[0].classes_[0]
    gateway["backends"][name]["api_key_env"] = "LOCUS_TEST_UNSET_KEY"
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv("LOCUS_TEST_UNSET_KEY", raising=False)
        else:
            monkeypatch.setenv("LOCUS_TEST_UNSET_KEY", value)
        with pytest.raises(ValueError, match="not set") as info:
            create_app(router_path, gateway=gateway)
        assert f"LOCUS_TEST_UNSET_KEY (api_key_env of backend(s) ['{name}'])" in str(
            info.value
        )

    # And on reload: the old router keeps serving.
    monkeypatch.setenv("LOCUS_TEST_UNSET_KEY", "sk-other")
    with serve(create_app(router_path, gateway=gateway)) as url:
        monkeypatch.delenv("LOCUS_TEST_UNSET_KEY")
        response = httpx.post(f"{url}/admin/reload")
        assert response.status_code == 409
        assert "LOCUS_TEST_UNSET_KEY" in response.json()["error"]["message"]
    assert sum(backends.hits.values()) == 0


def test_admin_token_any_header_bytes_and_an_unset_variable(
    router_path, monkeypatch, capsys
):
    """A non-ASCII Authorization header is a wrong token (401), not a 500; a
    non-ASCII token sent as UTF-8 is right; an unset variable is refused at
    start, not answered 401 at every reload."""
    monkeypatch.setenv("LOCUS_TEST_ADMIN", "s3cr\u00e9t")
    with serve(create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")) as url:
        for given in (b"Bearer s3cr\xe9t", b"Bearer \xff\xfe", b"Bearer s3cret"):
            response = httpx.post(
                f"{url}/admin/reload", headers={"authorization": given}
            )
            assert response.status_code == 401, (given, response.text)
        right = {"authorization": "Bearer s3cr\u00e9t".encode()}
        assert httpx.post(f"{url}/admin/reload", headers=right).status_code == 200

    for value in (None, ""):
        if value is None:
            monkeypatch.delenv("LOCUS_TEST_ADMIN")
        else:
            monkeypatch.setenv("LOCUS_TEST_ADMIN", value)
        with pytest.raises(ValueError, match=r"admin_token_env='LOCUS_TEST_ADMIN'"):
            create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
        _captured_app(monkeypatch)  # never serve for real
        argv = ["serve", str(router_path), "--admin-token-env", "LOCUS_TEST_ADMIN"]
        assert serve_main(argv) == 1
        err = capsys.readouterr().err
        assert (
            "--admin-token-env LOCUS_TEST_ADMIN: the environment variable is not"
            in (err)
        ), err


@pytest.mark.parametrize(
    "token, problem",
    [
        ("s3cret-TOKEN\r", "a carriage return (CR) at its end"),
        ("s3cret-TOKEN ", "a space or tab at its end"),
        (" s3cret-TOKEN", "a space or tab at position 1"),
        ("s3cret\n-TOKEN", "a line feed (LF) at position 7"),
        ("s3cret\x1b-TOKEN", "a control character at position 7"),
    ],
)
def test_an_admin_token_no_request_can_carry_is_refused_at_start(
    router_path, monkeypatch, capsys, token, problem
):
    """A CR left by an env file with CRLF line endings, or a space at either
    end, was accepted at start, and then every reload got 401 (a client
    refuses the CR, HTTP strips the spaces). Now it is refused at start,
    naming the variable, never the token."""
    monkeypatch.setenv("LOCUS_TEST_ADMIN", token)
    with pytest.raises(ValueError, match="cannot be sent in an HTTP header") as info:
        create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
    message = str(info.value)
    assert message.startswith("admin_token_env='LOCUS_TEST_ADMIN': ")
    assert problem in message and "control characters" in message
    assert "s3cret" not in message and "TOKEN" not in message

    _captured_app(monkeypatch)  # never serve for real
    argv = ["serve", str(router_path), "--admin-token-env", "LOCUS_TEST_ADMIN"]
    assert serve_main(argv) == 1
    err = capsys.readouterr().err
    assert "--admin-token-env LOCUS_TEST_ADMIN: the token" in err, err
    assert problem in err and "s3cret" not in err and "TOKEN" not in err


def test_an_admin_token_with_inner_spaces_or_any_bytes_is_accepted(
    router_path, monkeypatch
):
    """What a header value can hold stays valid: a space between two
    characters, and bytes that are not UTF-8 (the variable's own bytes,
    which ``.encode()`` refused: every reload was a 500)."""
    for token, sent in [
        ("s3cret TOKEN", b"Bearer s3cret TOKEN"),
        ("s3cr\udce9t", b"Bearer s3cr\xe9t"),  # the byte 0xE9, not UTF-8
    ]:
        monkeypatch.setenv("LOCUS_TEST_ADMIN", token)
        app = create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
        with serve(app) as url:
            wrong = {"authorization": b"Bearer s3cret"}
            assert httpx.post(f"{url}/admin/reload", headers=wrong).status_code == 401
            right = {"authorization": sent}
            response = httpx.post(f"{url}/admin/reload", headers=right, timeout=30)
            assert response.status_code == 200, (token, response.text)


def _serve_records(caplog):
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "locus_sklearn.serve"
    ]


def test_admin_reload_is_logged(router_path, routers, monkeypatch, caplog):
    """POST /admin/reload logged nothing (only the watcher did), though the
    docs say a reload is logged: now a success is logged at INFO with the
    new version, a failure at ERROR with the 409's reason, naming the
    configured file (not the private copy) and never the token."""
    monkeypatch.setenv("LOCUS_TEST_ADMIN", "s3cret-TOKEN")
    app = create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
    auth = {"authorization": "Bearer s3cret-TOKEN"}
    with caplog.at_level("INFO", logger="locus_sklearn.serve"):
        with TestClient(app) as client:
            routers[1].save(router_path)
            assert client.post("/admin/reload", headers=auth).status_code == 200
            assert _serve_records(caplog) == [
                ("INFO", f"Reloaded {router_path}: version 2")
            ]
            caplog.clear()
            router_path.write_bytes(b"not a router")
            response = client.post("/admin/reload", headers=auth)
            assert response.status_code == 409
            # No log line for a refused token: nothing was reloaded.
            assert client.post("/admin/reload").status_code == 401
    reason = response.json()["error"]["message"].split("still serving version 2: ")
    assert len(reason) == 2 and reason[1]
    assert _serve_records(caplog) == [
        ("ERROR", f"Reload of {router_path} failed: {reason[1]}")
    ]
    assert str(router_path) in reason[1] and "locus-serve-" not in reason[1]
    assert all("s3cret" not in r.getMessage() for r in caplog.records)


def test_watch_logs_each_reload_once(router_path, routers, caplog):
    """The watcher's lines are not doubled by the holder's logging, and a
    bad file is logged once, not at every check."""
    with caplog.at_level("INFO", logger="locus_sklearn.serve"):
        with serve(create_app(router_path, watch_interval=0.02)) as url:
            routers[1].save(router_path)
            _wait_for(lambda: _health(url)["router"]["version"] == 2, "the reload")
            # Replaced in one step: written in place, the watcher could read
            # the emptied file first and log that (rightly) as a reload too.
            bad = router_path.with_name("bad.tmp")
            bad.write_bytes(b"not a router")
            os.replace(bad, router_path)
            _wait_for(lambda: _health(url)["last_reload_error"], "the failed reload")
            time.sleep(0.3)  # 15 more checks of the unchanged bad file
            error = _health(url)["last_reload_error"]
    assert _serve_records(caplog) == [
        ("INFO", f"Reloaded {router_path}: version 2"),
        ("ERROR", f"Reload of {router_path} failed: {error}"),
    ]


def test_route_declares_only_the_503_it_answers(router_path, routers, backends):
    """/route's 503 was described as "or is overloaded", which it never
    answers (a request waits for its batch): its only 503 is the service
    not running. The gateway's, with its overload 503, keeps the text."""
    gateway = _gateway(backends, routers[0].classes_)
    app = create_app(router_path, gateway=gateway)
    spec = app.openapi()["paths"]
    described = spec["/route"]["post"]["responses"]["503"]["description"]
    assert described == "The service is not started or is shutting down"
    chat = spec["/v1/chat/completions"]["post"]["responses"]["503"]["description"]
    assert "overloaded" in chat
    # Without the lifespan run, the service is not started: the 503 /route has.
    response = TestClient(app).post("/route", json={"query": "q000"})
    assert response.status_code == 503
    assert "not started" in response.json()["error"]["message"], response.text


def test_batches_never_exceed_max_batch():
    """A request that would take a batch over max_batch waits for the next
    one; a single larger request goes alone, whole."""
    from locus_sklearn.serve._batching import MicroBatcher

    calls, release = [], threading.Event()

    def fn(context, items):
        calls.append(list(items))
        if len(calls) == 1:
            release.wait(10)
        return np.asarray(items)

    async def scenario():
        batcher = MicroBatcher(fn, max_batch=4)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit([0]))
            while not calls:
                await asyncio.sleep(0.001)
            parts = [[1, 2, 3], [4, 5, 6], [7], [8, 9, 10, 11, 12], [13]]
            later = []
            for part in parts:  # in this order
                later.append(asyncio.create_task(batcher.submit(part)))
                await asyncio.sleep(0)
            await asyncio.sleep(0.05)
            release.set()
            await first
            return [r.tolist() for r in await asyncio.gather(*later)], parts
        finally:
            await batcher.stop()

    rows, parts = asyncio.run(scenario())
    assert rows == parts
    assert calls == [[0], [1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11, 12], [13]]


def test_batches_never_mix_contexts_and_keep_arrival_order():
    """Each batch holds the items of one context only (fn gets it), so a
    request is answered in the context it was submitted with; an entry of
    another context ends the batch and starts the next one, in arrival
    order. The window is long: only a change of context closes a batch."""
    from locus_sklearn.serve._batching import MicroBatcher

    calls, release = [], threading.Event()

    def fn(context, items):
        calls.append((context, list(items)))
        if len(calls) == 1:
            release.wait(10)
        return [f"{context}:{item}" for item in items]

    old, new = object(), object()  # told apart by identity, as router states
    names = {id(old): "old", id(new): "new"}

    def named(context, items):
        return fn(names[id(context)], items)

    async def scenario():
        batcher = MicroBatcher(named, max_batch=8)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit([0], context=old))
            while not calls:
                await asyncio.sleep(0.001)
            parts = [(old, [1, 2]), (old, [3]), (new, [4]), (old, [5]), (new, [6, 7])]
            later = []
            for context, part in parts:  # in this order
                later.append(asyncio.create_task(batcher.submit(part, context=context)))
                await asyncio.sleep(0)
            await asyncio.sleep(0.05)
            release.set()
            return await first, await asyncio.wait_for(asyncio.gather(*later), 5)
        finally:
            await batcher.stop()

    first, later = asyncio.run(scenario())
    assert first == ["old:0"]
    assert later == [
        ["old:1", "old:2"],
        ["old:3"],
        ["new:4"],
        ["old:5"],
        ["new:6", "new:7"],
    ]
    assert calls == [
        ("old", [0]),
        ("old", [1, 2, 3]),
        ("new", [4]),
        ("old", [5]),
        ("new", [6, 7]),
    ]


def test_gateway_config_urls_names_and_yaml_numbers(tmp_path):
    """A query on base_url stays a query; a fragment, a blank model name, a
    number YAML 1.1 reads as a string and a key it reads as a boolean are
    refused, each saying what to write."""
    config = load_gateway_config(
        {"backends": {"m": {"base_url": "https://h.test/x/?api-version=2024-02-01"}}}
    )
    assert config.backends["m"].chat_url == (
        "https://h.test/x/chat/completions?api-version=2024-02-01"
    )
    with pytest.raises(ValueError, match=r"backends\.m\.base_url: .*fragment"):
        load_gateway_config({"backends": {"m": {"base_url": "http://h.test/v1#a"}}})
    with pytest.raises(ValueError, match=r"backends\.m\.model: .*blank.*\(got ' '\)"):
        load_gateway_config(
            {"backends": {"m": {"base_url": "http://h.test/v1", "model": " "}}}
        )
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "backends:\n  m:\n    base_url: http://h.test/v1\n    timeout: 1e3\n"
    )
    with pytest.raises(
        ValueError,
        match=r"backends\.m\.timeout: .*\(got '1e3'\); YAML 1\.1 reads 1e3 as a "
        r"string, not a number: write it as 1\.0e\+3 or 1000",
    ):
        load_gateway_config(path)
    path.write_text("backends:\n  yes:\n    base_url: http://h.test/v1\n")
    with pytest.raises(
        ValueError,
        match=r"the key yes \(line 2\) is read by YAML as True, not as a name; "
        r"write it in quotes: 'yes':",
    ):
        load_gateway_config(path)


# ------------------------------------- text, statuses, headers, lifecycle
def test_lone_surrogate_escapes_are_a_400_naming_the_field(
    router_path, routers, backends
):
    """``"\\ud800"`` is valid JSON syntax but not text UTF-8 can encode: a 400
    naming the field on /route and the gateway, never a 500 when forwarding
    it or writing it back, and no backend is called. A valid pair is text."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        for path, content, param in [
            (
                "/v1/chat/completions",
                b'{"model": "locus", "messages": [{"role": "system", "content": '
                b'"\\ud800"}, {"role": "user", "content": "q000"}]}',
                "messages.0.content",
            ),
            (
                "/v1/chat/completions",
                b'{"model": "locus", "messages": [{"role": "user", "content": '
                b'"q000"}], "user": "x\\udfff"}',
                "user",
            ),
            ("/route", b'{"query": "q000", "models": ["\\ud800"]}', "models.0"),
            ("/route", b'{"query": "q000", "\\ud800": 1}', "body"),
        ]:
            response = _post_raw(url, path, content)
            assert response.status_code == 400, (content, response.text)
            error = response.json()["error"]
            assert error["param"] == param, error
            assert "lone surrogate" in error["message"], error
        assert sum(backends.hits.values()) == 0
        pair = b'{"query": "q000", "models": ["\\ud83d\\ude00"]}'  # an emoji
        response = _post_raw(url, "/route", pair)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["param"] == "models"


def test_backend_answer_with_a_lone_surrogate_is_relayed_unchanged(
    router_path, routers, backends
):
    """Not a 500 after the backend answered: the client gets the JSON value
    the backend sent, from that backend."""
    model = routers[0].classes_[0]
    backends.modes[model] = "surrogate"
    gateway = _gateway(backends, routers[0].classes_)
    body = {"model": model, "messages": [{"role": "user", "content": "q000"}]}
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["x-locus-model"] == model
    assert response.json()["choices"][0]["message"]["content"] == "a\ud800b"
    assert backends.hits == {model: 1}


def test_a_begun_stream_is_relayed_past_the_deadline(router_path, routers, backends):
    """Each chunk of a stream that has begun within ``timeout`` of the one
    before, however long after the deadline: not cut at the deadline."""
    model = routers[0].classes_[0]
    backends.modes[model] = "gap"
    backends.gap = 1.0  # between the first chunk and the next
    gateway = _gateway(backends, routers[0].classes_, deadline=0.4)
    gateway["backends"][model]["timeout"] = 3.0
    body = {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": "q000"}],
    }
    with serve(create_app(router_path, gateway=gateway)) as url:
        try:
            response, text = _stream(url, body)
        except httpx.HTTPError as exc:  # the stream was cut
            pytest.fail(f"the stream was cut: {type(exc).__name__}: {exc}")
    assert response.headers["x-locus-model"] == model
    assert text == f"answer from {model}"
    assert backends.hits == {model: 1}


def test_a_body_in_utf16_or_utf32_is_a_400(router_path, routers, backends):
    """``json.loads`` would detect UTF-16 and UTF-32; the documented rule is
    UTF-8 only (a UTF-8 byte order mark is ignored)."""
    gateway = _gateway(backends, routers[0].classes_)
    chat = json.dumps(
        {"model": "locus", "messages": [{"role": "user", "content": "q000"}]}
    )
    route = json.dumps({"query": "q000"})
    with serve(create_app(router_path, gateway=gateway)) as url:
        for encoding in ("utf-16", "utf-16-be", "utf-32-le", "utf-32"):
            for path, text in [("/route", route), ("/v1/chat/completions", chat)]:
                response = _post_raw(url, path, text.encode(encoding))
                _assert_body_error(response, 400, "not UTF-8", "UTF-8")
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
        response = _post_raw(url, "/route", route.encode("utf-8-sig"))
        assert response.status_code == 200, response.text
    assert sum(backends.hits.values()) == 0


@pytest.mark.parametrize(
    "answer, error",
    [
        ((204, {}, b""), "HTTP 204"),
        (
            (
                301,
                {"location": "http://h.test/", "content-type": "text/html"},
                b"moved",
            ),
            "HTTP 301",
        ),
        ((202, {"content-type": "text/plain"}, b"queued"), "HTTP 202"),
        ((201, {"content-type": "application/json"}, b'{"id": "x"}'), "HTTP 201"),
    ],
)
def test_gateway_answers_below_400_other_than_200_fall_back(
    router_path, routers, backends, answer, error
):
    """A 204 has no answer to relay (it went out as a 204 with a body), a
    redirect lost its Location, a non-JSON 202 came back as an error under
    a success status: each is a failed attempt, as a non-JSON 200 is."""
    router = routers[0]
    routed = router.classes_[0]
    nearest = fallback_order(router).loc[routed].iloc[0]
    backends.modes[routed] = answer
    gateway = _gateway(backends, router.classes_)
    body = {"model": routed, "messages": [{"role": "user", "content": "q000"}]}
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["x-locus-model"] == nearest
    assert response.headers["x-locus-attempts"] == "2"
    assert response.json()["locus"]["failed"] == [{"model": routed, "error": error}]
    assert response.json()["choices"][0]["message"]["content"] == f"from {nearest}"


def test_error_answers_keep_their_headers(router_path, monkeypatch):
    """A 405 says what is allowed (``Allow``); the admin 401 says how to
    authenticate (``WWW-Authenticate``)."""
    monkeypatch.setenv("LOCUS_TEST_ADMIN", "s3cret")
    app = create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
    with serve(app) as url:
        for path in ("/route", "/admin/reload"):
            response = httpx.get(f"{url}{path}")
            assert response.status_code == 405
            assert response.headers["allow"] == "POST"
            assert response.json()["error"]["type"] == "http_error"
        response = httpx.post(f"{url}/admin/reload")
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["type"] == "auth_error"


def test_openapi_declares_the_real_error_body(router_path, routers, backends):
    """Every error status in the schema is ``{"error": {...}}`` as sent, not
    FastAPI's ``HTTPValidationError`` (``{"detail": [...]}``), and each
    status a route answers is declared."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        spec = httpx.get(f"{url}/openapi.json").json()
        invalid = httpx.post(f"{url}/route", json={"query": "q000", "top_k": "2"})
    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    body = schemas["ErrorBody"]
    assert body["required"] == ["error"]
    detail = schemas[body["properties"]["error"]["$ref"].rsplit("/", 1)[1]]
    assert {"message", "type", "param"} <= set(detail["required"])
    assert invalid.status_code == 422
    assert set(invalid.json()) == {"error"}
    assert set(detail["required"]) <= set(invalid.json()["error"])
    declared, relayed = {}, {}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, answer in operation["responses"].items():
                schema = answer.get("content", {}).get("application/json", {})
                if status == "4XX":  # a backend's 4xx, relayed with "locus"
                    relayed[(method, path)] = schema.get("schema")
                    continue
                if int(status) < 400:
                    continue
                declared.setdefault((method, path), set()).add(int(status))
                if path == "/healthz" and status == "503":
                    continue  # its 503 is the health body, status "unavailable"
                assert schema["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, (
                    method,
                    path,
                    status,
                )
    assert {400, 413, 415, 422, 503} <= declared[("post", "/route")]
    # The gateway answers an invalid request with OpenAI's 400, never 422.
    assert declared[("post", "/v1/chat/completions")] == {
        400,
        404,
        413,
        415,
        502,
        503,
        504,
    }
    assert relayed == {
        ("post", "/v1/chat/completions"): {
            "$ref": "#/components/schemas/RelayedErrorBody"
        }
    }
    assert {400, 401, 409, 413} <= declared[("post", "/admin/reload")]
    # Every operation declares the body limit's answers (400: a bad
    # Content-Length, 413: too long a body).
    assert all({400, 413} <= statuses for statuses in declared.values())
    assert declared[("get", "/healthz")] == {400, 413, 503}


def test_requests_without_the_lifespan_get_503(router_path, routers, backends):
    """An ASGI transport that does not run the lifespan, or a request after
    it ended: a 503 saying so, not a 500 or a request that hangs."""
    from starlette.testclient import TestClient

    gateway = _gateway(backends, routers[0].classes_)
    app = create_app(router_path, gateway=gateway)
    chat = {"model": "locus", "messages": [{"role": "user", "content": "q000"}]}

    async def unstarted():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return [
                await c.post("/route", json={"query": "q000"}),
                await c.post("/v1/chat/completions", json=chat),
            ]

    for response in asyncio.run(asyncio.wait_for(unstarted(), 10)):
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["type"] == "server_error" and "not started" in error["message"]

    with TestClient(app) as client:
        assert client.post("/route", json={"query": "q000"}).status_code == 200
    after = []
    thread = threading.Thread(
        target=lambda: after.append(client.post("/route", json={"query": "q000"})),
        daemon=True,
    )
    thread.start()
    thread.join(10)
    assert after, "the request after shutdown hangs"
    assert after[0].status_code == 503, after[0].text
    assert "shutting down" in after[0].json()["error"]["message"]
    assert sum(backends.hits.values()) == 0


def test_batcher_stop_fails_what_is_still_waiting():
    """Requests being computed, held for the next batch or still queued when
    the batcher stops fail with BatcherStopped (a 503 in the service), and
    so does a request submitted after: none waits forever."""
    from locus_sklearn.serve._batching import BatcherStopped, MicroBatcher

    started, release = threading.Event(), threading.Event()

    def fn(context, items):
        started.set()
        release.wait(10)
        return np.asarray(items)

    async def scenario():
        batcher = MicroBatcher(fn, max_batch=2)
        with pytest.raises(BatcherStopped, match="not started"):
            await batcher.submit([0])
        await batcher.start()
        # [0] is computed, [1, 2] held for the next batch, [3] queued.
        tasks = [
            asyncio.create_task(batcher.submit(part)) for part in ([0], [1, 2], [3])
        ]
        while not started.is_set():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        threading.Timer(0.2, release.set).start()
        await batcher.stop()
        results = await asyncio.wait_for(
            asyncio.gather(*tasks, return_exceptions=True), 5
        )
        with pytest.raises(BatcherStopped, match="shutting down"):
            await batcher.submit([5])
        return results

    results = asyncio.run(scenario())
    assert all(isinstance(r, BatcherStopped) for r in results), results


# ------------------------------------------------------ review fixes (47)
def test_gateway_config_yaml_merge_keys(tmp_path):
    """``<<: *shared`` is read as safe_load reads it (a key written beside it
    overrides the merged one); a key written twice is still refused."""
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "backends:\n"
        "  m1: &shared\n"
        "    base_url: http://127.0.0.1:9001/v1\n"
        "    timeout: 10\n"
        "  m2:\n"
        "    <<: *shared\n"
        "    timeout: 20\n"
        "    model: other\n"
    )
    config = load_gateway_config(path)
    m2 = config.backends["m2"]
    assert m2.chat_url == "http://127.0.0.1:9001/v1/chat/completions"
    assert (m2.timeout, m2.model) == (20.0, "other")
    assert config.backends["m1"].timeout == 10.0
    path.write_text(path.read_text() + "    model: again\n")
    with pytest.raises(ValueError, match="found the key 'model' a second time"):
        load_gateway_config(path)


def test_gateway_config_takes_any_mapping():
    from collections import UserDict
    from types import MappingProxyType

    backend = {"base_url": "http://127.0.0.1:9/v1"}
    for config in [
        MappingProxyType({"backends": {"m": backend}}),
        UserDict({"backends": {"m": backend}}),
        {"backends": MappingProxyType({"m": backend})},
        {"backends": {"m": MappingProxyType(backend)}},
    ]:
        loaded = load_gateway_config(config)
        assert loaded.backends["m"].chat_url == "http://127.0.0.1:9/v1/chat/completions"


def test_reloads_on_a_second_lifespan(router_path):
    """The reload lock is not bound to the loop of the first lifespan: an app
    run again (a new loop) reloads concurrently without a 409 (a lock bound
    to the first loop raised there)."""
    from locus_sklearn.serve._state import RouterHolder

    holder = RouterHolder(router_path)

    async def two_reloads():
        return await asyncio.gather(
            holder.reload(), holder.reload(), return_exceptions=True
        )

    for _ in range(2):
        results = asyncio.run(two_reloads())
        assert all(isinstance(r, tuple) for r in results), results
    assert holder.current.version == 5 and holder.last_error is None


def test_a_router_whose_own_cost_weight_overflows_is_refused(
    tmp_path, router_path, routers
):
    """Its default would fail every request with a 422 blaming the client,
    while router.predict routes such a weight to the cheapest model: refused
    at start and on reload, naming the file; a gateway default serves it."""
    router = routers[0]
    path = tmp_path / "huge.safetensors"
    own = router.cost_weight
    router.set_params(cost_weight=1e308)
    try:
        router.save(path)
    finally:
        router.set_params(cost_weight=own)
    with pytest.raises(ValueError, match=r"has cost_weight=1e\+308, too large"):
        create_app(path)
    app = create_app(
        path,
        gateway={
            "backends": {
                m: {"base_url": "http://127.0.0.1:9/v1"} for m in router.classes_
            },
            "cost_weight": 0.0,
        },
    )
    with TestClient(app) as client:
        assert client.post("/route", json={"query": "q000"}).status_code == 200
    app = create_app(router_path)
    router_path.write_bytes(path.read_bytes())
    with TestClient(app) as client:
        response = client.post("/admin/reload")
    assert response.status_code == 409
    assert str(router_path.absolute()) in response.json()["error"]["message"]


def test_create_app_returns_the_fastapi_app(router_path):
    from fastapi import FastAPI

    app = create_app(router_path, max_body_bytes=100)
    assert isinstance(app, FastAPI)
    assert app.state.service.holder.current.version == 1
    assert any(route.path == "/route" for route in app.routes)
    with TestClient(app) as client:
        response = client.post("/route", json={"query": "x" * 200})
    assert response.status_code == 413, response.text


def test_litellm_config_unfitted_router_or_a_router_file(
    router_path, routers, backends
):
    from sklearn.exceptions import NotFittedError

    gateway = _gateway(backends, routers[0].classes_)
    with pytest.raises(NotFittedError):
        litellm_config(LocusRouter(), gateway)
    for path in (router_path, str(router_path)):
        assert litellm_config(path, gateway) == litellm_config(routers[0], gateway)


def test_serve_logs_the_service_at_its_log_level(router_path, monkeypatch, capsys):
    """uvicorn configures only its own loggers: the service's (a reload at
    INFO) gets a handler and --log-level too."""
    import logging

    seen = _captured_app(monkeypatch)
    logger = logging.getLogger("locus_sklearn.serve")
    try:
        assert serve_main(["serve", str(router_path), "--log-level", "info"]) == 0
        loggers = seen["config"].log_config["loggers"]
        assert loggers["locus_sklearn.serve"]["level"] == "INFO"
        logger.info("Reloaded the router file")
        assert "Reloaded the router file" in capsys.readouterr().err
        assert serve_main(["serve", str(router_path), "--log-level", "warning"]) == 0
        logger.info("not shown")
        assert "not shown" not in capsys.readouterr().err
    finally:
        for handler in logger.handlers[:]:
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


@pytest.mark.parametrize(
    "host, said",
    [
        ("::1", "on http://[::1]:8123 "),
        ("", "on port 8123 of every interface "),
        ("127.0.0.1", "on http://127.0.0.1:8123 "),
    ],
)
def test_serving_line_gives_a_usable_address(
    router_path, monkeypatch, capsys, host, said
):
    _captured_app(monkeypatch)
    argv = ["serve", str(router_path), "--host", host, "--port", "8123"]
    assert serve_main([*argv, "--log-level", "critical"]) == 0
    assert said in capsys.readouterr().err


def test_batcher_counts_the_calls_of_a_failed_batch_rerun():
    """A failed batch is re-run request by request: each is a predictor call,
    counted as a batch with its queries."""
    from locus_sklearn.serve._batching import MicroBatcher

    calls = []

    def fn(context, items):
        calls.append(list(items))
        if "bad" in items:
            raise KeyError("unknown id 'bad'")
        return np.array([[len(x)] for x in items])

    async def scenario():
        batcher = MicroBatcher(fn, max_batch=10, window=0.05)
        await batcher.start()
        try:
            results = await asyncio.gather(
                batcher.submit(["a", "bb"]),
                batcher.submit(["bad"]),
                batcher.submit(["ccc"]),
                return_exceptions=True,
            )
        finally:
            await batcher.stop()
        return batcher, results

    batcher, results = asyncio.run(scenario())
    assert isinstance(results[1], KeyError)
    assert calls == [["a", "bb", "bad", "ccc"], ["a", "bb"], ["bad"], ["ccc"]]
    assert (batcher.n_batches, batcher.n_items) == (len(calls), sum(map(len, calls)))


def test_batcher_survives_a_base_exception_of_the_predictor():
    """SystemExit from the predictor fails its batch (a RuntimeError, a 500
    in the service) and the worker goes on answering."""
    from locus_sklearn.serve._batching import MicroBatcher

    def fn(context, items):
        if "boom" in items:
            raise SystemExit(3)
        return np.array([[len(x)] for x in items])

    async def scenario():
        batcher = MicroBatcher(fn, max_batch=8)
        await batcher.start()
        try:
            with pytest.raises(RuntimeError, match="raised SystemExit: 3"):
                await asyncio.wait_for(batcher.submit(["boom"]), 5)
            return await asyncio.wait_for(batcher.submit(["ok"]), 5)
        finally:
            await batcher.stop()

    rows = asyncio.run(scenario())
    assert rows.tolist() == [[2]]


def test_added_encodings_of_another_dimension_are_named(router_path, pool):
    """The added vector is the odd one, not the saved ones."""
    query = next(iter(pool.encodings))
    with pytest.raises(ValueError) as info:
        create_app(router_path, encoder={query: [1.0, 2.0]})
    message = str(info.value)
    dim = len(pool.encodings[query])
    assert f"must have their shape ({dim},); 1 of the 1 added" in message, message
    assert f"{query!r}: (2,)" in message and str(router_path) in message


def test_serve_onnx_backend_error_names_the_option(router_path, monkeypatch, capsys):
    _captured_app(monkeypatch)
    status = serve_main(["serve", str(router_path), "--encoder-backend", "onnx"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert "--encoder-backend onnx runs" in err and "Use --encoder-backend torch" in err
    assert "backend='" not in err


def test_batch_window_has_an_upper_bound(router_path, monkeypatch, capsys):
    _captured_app(monkeypatch)
    with pytest.raises(
        ValueError, match=r"batch_window_ms must be .* <= 10000; got 1e"
    ):
        create_app(router_path, batch_window_ms=1e308)
    with pytest.raises(SystemExit) as info:
        serve_main(["serve", str(router_path), "--batch-window-ms", "20000"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch-window-ms: expected milliseconds in [0, 10000], got '20000'" in err
    assert serve_main(["serve", str(router_path), "--batch-window-ms", "10000"]) == 0


# --------------------------------------------- model names, pinning, numbers
def test_gateway_headers_carry_any_model_name(tmp_path, pool, backends):
    """A model name outside Latin-1 (an en dash, CJK) could not be written
    in a header as it is: the gateway answered 500 after the backend had
    answered. Now the headers hold it percent-encoded as UTF-8, ``unquote``
    gives it back, and the ``locus`` field holds it as it is."""
    from urllib.parse import unquote

    models = sorted(pool.evals["model"].unique())
    new = ["qwen2.5–7b", "日本語-llm-7b", "50% model", "café"]  # an en dash, CJK
    names = dict(zip(models[: len(new)], new, strict=True))
    evals = pool.evals.assign(model=pool.evals["model"].replace(names))
    router = LocusRouter(
        LocusEmbedder(pool.encodings, **{**TINY, "max_epochs": 1, "random_state": 0}),
        shrinkage=None,
    ).fit(evals)
    path = tmp_path / "names.safetensors"
    router.save(path)
    gateway = {
        "backends": {
            name: {"base_url": backends.url(f"m{i}")}
            for i, name in enumerate(router.classes_)
        }
    }
    expected = {
        "qwen2.5–7b": "qwen2.5%E2%80%937b",
        "日本語-llm-7b": "%E6%97%A5%E6%9C%AC%E8%AA%9E-llm-7b",
        "50% model": "50%25%20model",
        "café": "caf%C3%A9",
        # visible ASCII without %: as it is
        **{name: name for name in models[len(new) :]},
    }
    with serve(create_app(path, gateway=gateway)) as url:
        for name, header in expected.items():
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "q000"}]},
            )
            assert response.status_code == 200, (name, response.text)
            assert response.headers["x-locus-model"] == header
            assert response.headers["x-locus-routed-model"] == header
            assert unquote(header) == name
            assert response.json()["locus"]["model"] == name
        # A streamed answer has the same headers.
        body = {
            "model": "qwen2.5–7b",
            "stream": True,
            "messages": [{"role": "user", "content": "q000"}],
        }
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["x-locus-model"] == "qwen2.5%E2%80%937b"
            assert "data: [DONE]" in r.read().decode()
    assert sum(backends.hits.values()) == len(expected) + 1


def test_gateway_pinned_model_is_not_routed(router_path, routers, backends):
    """A request pinned to a served model skips routing: its messages are
    not read (text the router's precomputed encodings do not hold, an
    image-only or missing user message, one over max_query_chars) and no
    prediction is made; it is forwarded unchanged, and still falls back."""
    router = routers[0]
    pinned = router.classes_[0]
    gateway = _gateway(backends, router.classes_)
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]
    cases = [
        [{"role": "user", "content": "Hello, who are you?"}],  # not an id
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": image}],
        [{"role": "assistant", "content": "hi"}],  # no user message
        [{"role": "user", "content": "x" * 60}],  # over max_query_chars
    ]
    app = create_app(router_path, gateway=gateway, max_query_chars=50)
    with serve(app) as url:
        for messages in cases:
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": pinned, "messages": messages, "cost_weight": 0.5},
            )
            assert response.status_code == 200, (messages, response.text)
            assert response.headers["x-locus-model"] == pinned
            model, _, body = backends.seen[-1]
            assert model == pinned and body["messages"] == messages
            assert "cost_weight" not in body
        batching = httpx.get(f"{url}/healthz").json()["batching"]
        assert batching["requests"] == 0 and batching["batches"] == 0
        # Falls back along the fallback order, unrouted still.
        backends.modes[pinned] = 503
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": pinned, "messages": cases[0]},
        )
        assert response.status_code == 200, response.text
        nearest = fallback_order(router).loc[pinned].iloc[0]
        assert response.headers["x-locus-model"] == nearest
        assert response.headers["x-locus-routed-model"] == pinned
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0

    async def without_lifespan(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(
                "/v1/chat/completions",
                json={"model": pinned, "messages": cases[0]},
            )

    # Once the lifespan ended, or before it ran: a 503 saying so, as a routed
    # request gets.
    for unserved, message in [
        (app, "shutting down"),
        (create_app(router_path, gateway=gateway), "not started"),
    ]:
        response = asyncio.run(asyncio.wait_for(without_lifespan(unserved), 10))
        assert response.status_code == 503, response.text
        assert message in response.json()["error"]["message"]
    assert backends.hits[pinned] == len(cases) + 1


def test_gateway_stream_null_is_no_stream(router_path, routers, backends):
    """OpenAI's API takes ``"stream": null`` (its SDK may send it): no
    stream, forwarded as it is."""
    router = routers[0]
    gateway = _gateway(backends, router.classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = _chat(url, "q000", stream=None)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    routed = router.predict(["q000"])[0]
    assert response.json()["locus"]["model"] == routed
    _, _, body = backends.seen[-1]
    assert "stream" in body and body["stream"] is None


def test_gateway_invalid_requests_are_openai_400s(router_path, routers, backends):
    """OpenAI answers an invalid request with 400 and its error object, and
    so does the gateway, a bad field included; /route answers the same
    field's problem with 422."""
    router = routers[0]
    gateway = _gateway(backends, router.classes_[:3])
    user = [{"role": "user", "content": "q000"}]
    with serve(create_app(router_path, gateway=gateway)) as url:
        for extra, param in [
            ({"temperature": 0.2, "cost_weight": -1}, "cost_weight"),
            ({"cost_weight": "high"}, "cost_weight"),
            ({"models": [router.classes_[0]] * 2}, "models"),
            ({"models": [router.classes_[4]]}, "models"),  # no backend
            ({"messages": [{"role": "user", "content": "an unknown id"}]}, "messages"),
            ({"messages": [{"content": "q000"}]}, "messages.0.role"),
        ]:
            body = {"model": "locus", "messages": user, **extra}
            response = httpx.post(f"{url}/v1/chat/completions", json=body)
            assert response.status_code == 400, (extra, response.text)
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error", error
            assert error["param"] == param, (extra, error)
        response = httpx.post(f"{url}/route", json={"query": "q0", "cost_weight": -1})
        assert response.status_code == 422, response.text
    assert sum(backends.hits.values()) == 0


def test_integers_beyond_a_double_are_refused_like_1e400(
    router_path, routers, backends
):
    """``1`` followed by 400 zeros is beyond a double as ``1e400`` is: a 400
    naming it on /route and the gateway, never forwarded, and one of 5001
    digits gets the same message, not Python's advice to raise its limit."""
    import sys

    from locus_sklearn.serve._app import _strict_json

    biggest = int(sys.float_info.max)
    assert _strict_json(str(biggest)) == biggest  # a double's range, exactly
    assert _strict_json(f"[-{biggest}, 7]") == [-biggest, 7]
    for text in (str(2**1024), f"-{2**1024}"):  # rounds to infinity
        with pytest.raises(ValueError, match="is out of range"):
            _strict_json(text)
    gateway = _gateway(backends, routers[0].classes_)
    big = "1" + "0" * 400
    with serve(create_app(router_path, gateway=gateway)) as url:
        chat = (
            '{"model": "locus", "messages": [{"role": "user", "content": "q000"}], '
            f'"temperature": {big}}}'
        )
        response = _post_raw(url, "/v1/chat/completions", chat.encode())
        _assert_body_error(response, 400, "not valid JSON", "is out of range")
        assert "(401 characters)" in response.json()["error"]["message"]
        response = _post_raw(
            url, "/route", f'{{"query": "q000", "cost_weight": {big}}}'
        )
        _assert_body_error(response, 400, "is out of range")
        huge = "1" + "0" * 5000
        response = _post_raw(url, "/route", f'{{"query": "q000", "top_k": {huge}}}')
        _assert_body_error(response, 400, "is out of range", "(5001 characters)")
        assert "set_int_max_str_digits" not in response.text
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
    assert sum(backends.hits.values()) == 0


def test_litellm_config_of_a_file_saved_without_query_text(tmp_path, routers, backends):
    """The export reads only the pool and its model embeddings: a file saved
    with include_query_text=False (which cannot load without its mapping
    encoder) exports as the router itself does."""
    router = routers[0]
    path = tmp_path / "hashed.safetensors"
    router.save(path, include_query_text=False)
    with pytest.raises(ValueError, match="saved without query text"):
        LocusRouter.load(path)
    gateway = _gateway(backends, router.classes_)
    assert litellm_config(path, gateway) == litellm_config(router, gateway)


def _nested(levels):
    """``levels`` arrays, each inside the one before: ``[[]]`` for 2."""
    return "[" * levels + "]" * levels


def test_json_nested_too_deeply_is_a_400_or_a_failed_attempt(
    router_path, routers, backends, queries
):
    """Arrays and objects nest at most MAX_JSON_DEPTH (128) levels, the body
    itself being the first: a body that parses is always encoded again (a
    chat request forwarded, a backend's answer relayed), where a bound left
    to the recursion limit let through bodies about 955 levels deep that
    then failed to encode (a 500, with no fallback for an answer)."""
    router = routers[0]
    query = queries[0]
    routed = router.predict([query])[0]
    nearest = fallback_order(router).loc[routed].iloc[0]
    pinned = next(m for m in router.classes_ if m not in (routed, nearest))

    def answer(levels):
        return f'{{"id": "x", "choices": [], "x": {_nested(levels)}}}'.encode()

    # One level too many (129 with the answer's object), then the most.
    backends.modes[routed] = (
        200,
        {"content-type": "application/json"},
        answer(128),
    )
    backends.modes[pinned] = (
        200,
        {"content-type": "application/json"},
        answer(127),
    )
    gateway = _gateway(backends, router.classes_)

    def chat(model, metadata):
        return (
            f'{{"model": "{model}", "messages": [{{"role": "user", "content": '
            f'"{query}"}}], "metadata": {metadata}}}'
        )

    with serve(create_app(router_path, gateway=gateway)) as url:
        for levels in (128, 955, 3000):  # 129, 956 and 3001 with the body
            response = _post_raw(
                url, "/v1/chat/completions", chat("locus", _nested(levels))
            )
            _assert_body_error(
                response, 400, "not valid JSON: too deeply nested", "at most 128"
            )
        response = _post_raw(
            url, "/route", '{"query": "q000", "x": ' + _nested(128) + "}"
        )
        _assert_body_error(response, 400, "too deeply nested")
        assert sum(backends.hits.values()) == 0

        response = _post_raw(url, "/v1/chat/completions", chat("locus", _nested(127)))
        assert response.status_code == 200, response.text
        data = response.json()
        assert data["locus"]["failed"] == [
            {"model": routed, "error": "invalid JSON answer"}
        ]
        assert data["locus"]["model"] == nearest
        assert backends.seen[-1][2]["metadata"] == json.loads(_nested(127))

        response = _post_raw(url, "/v1/chat/completions", chat(pinned, "null"))
        assert response.status_code == 200, response.text
        assert response.json()["x"] == json.loads(_nested(127))
        assert response.json()["locus"]["failed"] == []

    from locus_sklearn.serve._app import MAX_JSON_DEPTH, _strict_json

    assert MAX_JSON_DEPTH == 128
    assert _strict_json(_nested(128)) == json.loads(_nested(128))
    assert _strict_json(b'{"a": %s}' % _nested(127).encode())["a"] == json.loads(
        _nested(127)
    )
    for text in (_nested(129), '{"a": ' + _nested(128) + "}", _nested(5000)):
        for content in (text, text.encode()):
            with pytest.raises(ValueError, match="too deeply nested"):
                _strict_json(content)


def test_gateway_wrong_typed_content_names_the_field(router_path, routers, backends):
    """A message content of none of its types is one 400 naming the field,
    not one error per member of the union, located under the member's type
    (``messages.0.content.str``)."""
    gateway = _gateway(backends, routers[0].classes_)
    expected = "Input should be a string, null or a list of content-part objects"
    with serve(create_app(router_path, gateway=gateway)) as url:
        for content, got in [
            (5, " (got 5)"),
            (True, " (got True)"),
            (["hi"], ""),
            ({"type": "text", "text": "hi"}, ""),
        ]:
            messages = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": content},
            ]
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "locus", "messages": messages},
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["param"] == "messages.1.content", error
            assert error["message"] == f"messages.1.content: {expected}{got}"
        # Each of its types still validates.
        for content in ("q000", [{"type": "text", "text": "q000"}]):
            response = httpx.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": "locus",
                    "messages": [{"role": "user", "content": content}],
                },
            )
            assert response.status_code == 200, response.text
    assert sum(backends.hits.values()) == 2


def test_gateway_refuses_a_backend_for_a_model_named_locus(tmp_path, pool, backends):
    """A pool model named as the routing alias could never be requested by
    name (``model="locus"`` routes the request) and would be listed twice by
    /v1/models: its backend is refused, naming the model and why."""
    models = sorted(pool.evals["model"].unique())
    evals = pool.evals.assign(model=pool.evals["model"].replace({models[0]: "locus"}))
    router = LocusRouter(
        LocusEmbedder(pool.encodings, **{**TINY, "max_epochs": 1, "random_state": 0}),
        shrinkage=None,
    ).fit(evals)
    assert "locus" in router.classes_
    path = tmp_path / "alias.safetensors"
    router.save(path)
    with pytest.raises(ValueError, match="backend for the model 'locus'") as info:
        create_app(path, gateway=_gateway(backends, router.classes_))
    assert "could never be requested by name" in str(info.value)
    # Without a backend of its own, the model is routed among the others.
    served = [m for m in router.classes_ if m != "locus"]
    with TestClient(create_app(path, gateway=_gateway(backends, served))) as client:
        listed = client.get("/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["locus", *served]


def test_healthz_is_503_when_the_service_cannot_answer(router_path):
    """/healthz reports what a request would find: before the lifespan has
    run, or once it has ended, /route answers 503, and so does /healthz,
    with a status that is not "ok", its reason and its usual fields."""
    from starlette.testclient import TestClient

    app = create_app(router_path)
    client = TestClient(app)
    for when, reason in [("before", "not started"), ("after", "shutting down")]:
        response = client.get("/healthz")
        assert response.status_code == 503, (when, response.text)
        health = response.json()
        assert health["status"] == "unavailable" and reason in health["reason"]
        assert health["router"]["version"] == 1
        assert {"batching", "reloads", "last_reload_error"} <= set(health)
        with TestClient(app) as running:
            response = running.get("/healthz")
            assert response.status_code == 200
            assert response.json()["status"] == "ok"
            assert "reason" not in response.json()


def test_an_empty_json_body_is_a_400(router_path, routers, backends):
    """An empty body sent as JSON is malformed JSON, as a blank one is: 400,
    not the 422 of a missing body."""
    gateway = _gateway(backends, routers[0].classes_)
    with serve(create_app(router_path, gateway=gateway)) as url:
        for path in ("/route", "/v1/chat/completions"):
            for content in (b"", iter([b""])):  # Content-Length: 0, or chunked
                response = _post_raw(url, path, content)
                _assert_body_error(response, 400, "not valid JSON: it is empty")
            response = _post_raw(url, path, b" ")
            _assert_body_error(response, 400, "not valid JSON")
        assert httpx.get(f"{url}/healthz").json()["batching"]["requests"] == 0
    assert sum(backends.hits.values()) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_as_the_router_is_refused_without_blocking(tmp_path):
    # The holder read the pipe whole, waiting for a writer that never came.
    from locus_sklearn.serve._state import RouterHolder

    fifo = tmp_path / "router.fifo"
    os.mkfifo(fifo)

    with pipe_released_after(fifo, 10):  # a reader that blocks fails, not hangs
        with pytest.raises(OSError, match="is a named pipe \\(FIFO\\), not a regular"):
            RouterHolder(fifo)


# ------------------------------------- keys, stream types, disconnects, config
@pytest.mark.parametrize(
    "key, problem",
    [
        ("sk-SECRET-0123456789\r", "a carriage return (CR) at its end"),
        ("sk-SECRET-0123456789 ", "a space or tab at its end"),
        ("sk-SECRET\n-0123456789", "a line feed (LF) at position 10"),
        ("sk-SECRET-01234\u20136789", "a character outside ASCII at position 16"),
    ],
)
def test_a_key_that_cannot_be_a_header_is_refused_at_start(
    router_path, routers, backends, monkeypatch, key, problem
):
    """A CR left by an env file with CRLF line endings made h11 refuse the
    header, and its error text, the key in it, reached every client in the
    502 body; a non-ASCII key was a 500. Now the variable is named at start,
    its value never shown."""
    monkeypatch.setenv("LOCUS_TEST_KEY", key)
    gateway = _gateway(backends, routers[0].classes_)
    with pytest.raises(ValueError, match="cannot be sent in an HTTP header") as info:
        create_app(router_path, gateway=gateway)
    message = str(info.value)
    assert "LOCUS_TEST_KEY (api_key_env of backend(s) [" in message
    assert problem in message
    assert "SECRET" not in message and "0123456789" not in message
    assert sum(backends.hits.values()) == 0


def test_a_failed_attempt_never_shows_the_exception_text(
    router_path, routers, backends, monkeypatch, caplog
):
    """Each attempt's error reached the client as ``{type}: {exc}``: h11's
    LocalProtocolError holds the header value it refused, the key included.
    The client now gets the type and a fixed description; the text is
    logged with the key redacted."""
    key = "sk-SECRET-0123456789"
    monkeypatch.setenv("LOCUS_TEST_KEY", key)
    router = routers[0]
    routed = router.classes_[0]
    order = [routed, *fallback_order(router).loc[routed].iloc[:2]]
    failures = iter(
        [
            httpx.LocalProtocolError(f"Illegal header value b'Bearer {key}\\r'"),
            httpx.ConnectError(f"refused, key {key!r}"),
            httpx.RemoteProtocolError(f"bad answer to Bearer {key}"),
        ]
    )

    def fail(request):
        raise next(failures)

    gateway = _gateway(backends, router.classes_)
    app = create_app(router_path, gateway=gateway)
    service = app.state.service
    body = {"model": routed, "messages": [{"role": "user", "content": "q000"}]}
    with caplog.at_level("WARNING", logger="locus_sklearn.serve"):
        with serve(app) as url:
            own = service.client
            service.client = httpx.AsyncClient(transport=httpx.MockTransport(fail))
            try:
                response = httpx.post(
                    f"{url}/v1/chat/completions", json=body, timeout=30
                )
            finally:
                asyncio.run(service.client.aclose())
                service.client = own
    assert response.status_code == 502, response.text
    assert "SECRET" not in response.text and "0123456789" not in response.text
    assert response.json()["error"]["attempts"] == [
        {"model": order[0], "error": "LocalProtocolError: invalid request to backend"},
        {"model": order[1], "error": "ConnectError: connection failed"},
        {
            "model": order[2],
            "error": "RemoteProtocolError: invalid response from backend",
        },
    ]
    logged = [r.getMessage() for r in caplog.records if "Gateway attempt" in r.message]
    assert len(logged) == 3
    assert "Illegal header value b'Bearer [redacted]\\r'" in logged[0]
    assert "refused, key '[redacted]'" in logged[1]
    assert not any("SECRET" in line for line in logged)
    assert sum(backends.hits.values()) == 0

    # A key with a CR (its variable changed after start-up), as h11 writes
    # it in its error: as bytes, the CR escaped.
    from locus_sklearn.serve._gateway import _redact

    monkeypatch.setenv("LOCUS_TEST_KEY", key + "\r")
    refused = f"Bearer {key}\r".encode()
    text = f"Illegal header value {refused!r}"
    assert _redact(text, service.gateway) == "Illegal header value b'Bearer [redacted]'"


def test_a_request_that_cannot_be_built_is_a_failed_attempt(
    router_path, routers, backends, monkeypatch
):
    """build_request ran outside the attempt's try: a key httpx cannot
    encode (its variable changed after start-up) was a 500 with no
    fallback. Now it fails that attempt and the next model answers."""
    router = routers[0]
    routed = router.classes_[0]
    nearest = fallback_order(router).loc[routed].iloc[0]
    gateway = _gateway(backends, router.classes_)
    gateway["backends"][routed]["api_key_env"] = "LOCUS_TEST_OTHER_KEY"
    monkeypatch.setenv("LOCUS_TEST_OTHER_KEY", "sk-other")
    body = {"model": routed, "messages": [{"role": "user", "content": "q000"}]}
    with serve(create_app(router_path, gateway=gateway)) as url:
        monkeypatch.setenv("LOCUS_TEST_OTHER_KEY", "sk-\u2013other")
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["x-locus-model"] == nearest
    assert response.json()["locus"]["failed"] == [
        {"model": routed, "error": "UnicodeEncodeError: invalid request to backend"}
    ]
    assert backends.hits == {nearest: 1}


def test_batch_window_counts_from_the_first_arrival():
    """The window started when the worker took a batch's first request, not
    when it arrived: a request that came while the previous batch computed
    waited the computation and then a whole window more. Its window (0.5 s)
    has passed when the computation (1 s) ends, so its batch is computed at
    once."""
    from locus_sklearn.serve._batching import MicroBatcher

    compute, window = 1.0, 0.5
    calls, started = [], threading.Event()

    def fn(context, items):
        begin = time.monotonic()
        started.set()
        time.sleep(compute)
        calls.append((list(items), begin, time.monotonic()))
        return np.asarray(items)

    async def scenario():
        # The first request fills its batch (max_batch 2): computed at once.
        batcher = MicroBatcher(fn, max_batch=2, window=window)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit([1, 2]))
            while not started.is_set():
                await asyncio.sleep(0.001)
            second = await batcher.submit([3])
            return await first, second
        finally:
            await batcher.stop()

    first, second = asyncio.run(scenario())
    assert first.tolist() == [1, 2] and second.tolist() == [3]
    assert [items for items, _, _ in calls] == [[1, 2], [3]]
    # At once after the first call: not a window (0.5 s) later.
    gap = calls[1][1] - calls[0][2]
    assert gap < window / 2, gap


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"content-type": "text/html"}, b"<html><h1>502 Bad Gateway</h1></html>"),
        (200, {"content-type": "application/json"}, b'{"id": "x", "choices": ['),
        (200, {"content-type": "application/json"}, b"[]"),
        (200, {}, b"data: {}\n\n"),
        "empty",
    ],
    ids=["html", "truncated-json", "json-array", "no-content-type", "empty"],
)
def test_a_streamed_200_that_is_no_event_stream_falls_back(
    router_path, routers, backends, answer
):
    """stream=true took any 200 with a first byte as the stream: an nginx
    error page reached the client as its "stream", where a non-streamed
    request fell back. A 200 that is not text/event-stream is now read whole
    and judged as a non-streamed answer. A 200 event stream that ends before
    its first byte ("empty") is not relayed as an empty complete stream
    either: the next model answers."""
    router = routers[0]
    routed = router.classes_[0]
    nearest = fallback_order(router).loc[routed].iloc[0]
    backends.modes[routed] = answer
    gateway = _gateway(backends, router.classes_)
    body = {
        "model": routed,
        "stream": True,
        "messages": [{"role": "user", "content": "q000"}],
    }
    with serve(create_app(router_path, gateway=gateway)) as url:
        response, text = _stream(url, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-locus-model"] == nearest
    assert response.headers["x-locus-attempts"] == "2"
    assert text == f"answer from {nearest}"


def test_a_json_answer_to_a_streamed_request_is_relayed_as_json(
    router_path, routers, backends
):
    """A backend that does not stream answers stream=true with its JSON
    completion: that is an answer, relayed as JSON (with the locus field),
    not a failed attempt."""
    router = routers[0]
    routed = router.classes_[0]
    completion = {"id": "c", "object": "chat.completion", "choices": []}
    backends.modes[routed] = (
        200,
        {"content-type": "application/json"},
        json.dumps(completion).encode(),
    )
    gateway = _gateway(backends, router.classes_)
    body = {
        "model": routed,
        "stream": True,
        "messages": [{"role": "user", "content": "q000"}],
    }
    with serve(create_app(router_path, gateway=gateway)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-locus-attempts"] == "1"
    locus = {"model": routed, "routed_model": routed, "failed": []}
    assert response.json() == {**completion, "locus": locus}


@pytest.mark.parametrize("stream", [False, True])
def test_gateway_stops_when_the_client_disconnects(
    router_path, routers, backends, stream
):
    """A client that gave up while the first backend stalled still had the
    next models called for it (each call possibly paid): four hits for a
    client long gone. Now the gateway stops at the next attempt."""
    router = routers[0]
    routed = router.classes_[0]
    backends.stall = 1.0
    for m in router.classes_:
        backends.modes[m] = "stall"
    gateway = _gateway(backends, router.classes_, max_attempts=4, deadline=10.0)
    for m in router.classes_:
        gateway["backends"][m]["timeout"] = 0.4
    body = {
        "model": routed,
        "stream": stream,
        "messages": [{"role": "user", "content": "q000"}],
    }
    with serve(create_app(router_path, gateway=gateway)) as url:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{url}/v1/chat/completions", json=body, timeout=0.15)
        # The first attempt times out at 0.4 s; the old code called the
        # next model then, and another every 0.4 s (4 hits by 1.5 s). None
        # if the client gave up before the first attempt was sent.
        time.sleep(1.5)
        assert sum(backends.hits.values()) <= 1, backends.hits


def test_gateway_config_unknown_keys_list_the_valid_ones(tmp_path, routers):
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError) as info:
        load_gateway_config(
            {"backends": {"m": {"base_url": url, "timout": 30}}, "fallbacks": {}}
        )
    assert str(info.value) == (
        "Invalid gateway configuration: backends.m.timout: unknown key (did you "
        "mean 'timeout'? valid keys: base_url, model, api_key_env, timeout); "
        "fallbacks: unknown key (did you mean 'fallback'? valid keys: backends, "
        "fallback, cost_weight)"
    )
    # A key written in the file: not echoed, and pointed to api_key_env.
    with pytest.raises(ValueError) as info:
        load_gateway_config({"backends": {"m": {"base_url": url, "api_key": "sk-12"}}})
    assert str(info.value) == (
        "Invalid gateway configuration: backends.m.api_key: unknown key, its value "
        "not shown (a key is never written in the file: put it in an environment "
        "variable and name the variable with api_key_env, e.g. api_key_env: "
        "OPENAI_API_KEY)"
    )
    # litellm-config names the pool, as locus serve does.
    pool = list(routers[0].classes_)
    with pytest.raises(ValueError) as info:
        litellm_config(routers[0], {"backends": {"nope": {"base_url": url}}})
    listed = ", ".join(repr(m) for m in pool[:5])  # 6 models: the first 5
    assert str(info.value).endswith(f"['nope']; its models are [{listed}, ...].")


def test_gateway_json_config_with_a_byte_order_mark(tmp_path):
    """A JSON file saved with a UTF-8 BOM (Windows editors) was refused as
    not valid JSON; its YAML twin loaded."""
    config = {"backends": {"m": {"base_url": "http://127.0.0.1:9/v1"}}}
    path = tmp_path / "gateway.json"
    path.write_bytes(json.dumps(config).encode("utf-8-sig"))
    assert load_gateway_config(path) == load_gateway_config(config)


def test_litellm_export_retries_each_model_once(routers, backends):
    """LiteLLM retries a model num_retries times before it falls back; the
    gateway tries each model once, and so does the export."""
    config = litellm_config(routers[0], _gateway(backends, routers[0].classes_))
    assert config["router_settings"]["num_retries"] == 0


@pytest.mark.parametrize(
    "value, shown",
    [
        ("sk-abc123-SECRET", False),
        ("MY KEY", False),
        ("$OPENAI_API_KEY", True),
        ("${OPENAI_API_KEY}", True),
        ("os.environ/OPENAI_API_KEY", True),
    ],
)
def test_gateway_config_refused_api_key_env_is_not_echoed_if_it_may_be_a_key(
    value, shown
):
    # The key itself written in place of the variable's name would be printed
    # to the terminal and CI logs; a $VAR-style reference names a variable.
    backend = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": value}
    with pytest.raises(ValueError, match=r"backends\.m\.api_key_env") as info:
        load_gateway_config({"backends": {"m": backend}})
    message = str(info.value)
    assert (value in message) is shown
    if not shown:
        assert "its value not shown" in message
        assert "api_key_env: OPENAI_API_KEY" in message


def test_litellm_config_writes_non_ascii_names_as_they_are(tmp_path, pool, capsys):
    # yaml.safe_dump escaped them ("mod\xE8le-fran\xE7ais"): valid YAML that
    # loads back, but not the name a user reads in the file.
    name, other = "modèle-日本語", pool.evals["model"].max()
    evals = pool.evals.replace({"model": {pool.evals["model"].min(): name}})
    router = LocusRouter(
        LocusEmbedder(pool.encodings, **{**TINY, "max_epochs": 1, "random_state": 0})
    ).fit(evals)
    path = tmp_path / "router.safetensors"
    router.save(path)
    gateway = tmp_path / "gateway.yaml"
    backends = {m: {"base_url": "http://127.0.0.1:9/v1"} for m in (name, other)}
    gateway.write_text(
        yaml.safe_dump({"backends": backends}, allow_unicode=True), encoding="utf-8"
    )
    out = tmp_path / "litellm.yaml"
    argv = ["litellm-config", str(path), "--config", str(gateway)]
    assert serve_main([*argv, "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_bytes().decode("utf-8")
    assert f"model_name: {name}\n" in text
    assert f"model: openai/{name}\n" in text
    assert "\\x" not in text and "\\u" not in text
    loaded = yaml.safe_load(text)
    assert [m["model_name"] for m in loaded["model_list"]] == sorted([name, other])
    assert loaded == litellm_config(router, gateway)
    # Printed on stdout, the same text.
    assert serve_main(argv) == 0
    assert capsys.readouterr().out == text


# ------------------------------------------- paths, cross-site reloads, HEAD
def test_the_router_loads_without_room_in_the_temporary_folder(
    tmp_path, router_path, routers, monkeypatch
):
    """The router was copied into TMPDIR before it was loaded: with a
    temporary folder too small (here one that cannot hold a file at all) a
    valid router could not be served, and the error ("[Errno 28] No space
    left on device") named neither folder nor file. The snapshot is now an
    anonymous in-memory file; where there is none, the folder's error names
    TMPDIR and the router file."""
    import tempfile

    from locus_sklearn.serve._state import RouterHolder

    not_a_folder = tmp_path / "tmpdir-is-a-file"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        holder = RouterHolder(router_path, device="cpu")
        assert list(holder.current.classes) == list(routers[0].classes_)
        with TestClient(create_app(router_path, device="cpu")) as client:
            routers[1].save(router_path)
            response = client.post("/admin/reload")
            assert response.status_code == 200, response.text
            assert response.json()["n_models"] == len(routers[1].classes_)
        routers[0].save(router_path)
    monkeypatch.delattr(os, "memfd_create", raising=False)
    with pytest.raises(OSError) as info:
        RouterHolder(router_path, device="cpu")
    message = str(info.value)
    assert repr(str(router_path.absolute())) in message, message
    assert repr(str(not_a_folder)) in message and "TMPDIR" in message, message
    assert info.value.errno == 20  # ENOTDIR, kept for the CLI's exit status


def test_one_load_sees_one_version_of_the_router_file(
    router_path, routers, monkeypatch
):
    """load_estimator reads the file more than once (its kind, then the
    router): a file replaced between two reads must not be loaded half from
    each, so a load reads the snapshot taken first."""
    from locus_sklearn._cli import _io
    from locus_sklearn.serve._state import RouterHolder

    file_kind = _io._file_kind
    replaced = []

    def kind_then_replace(path):
        kind = file_kind(path)
        if not replaced:
            routers[1].save(router_path)  # atomic: a new file under the name
            replaced.append(path)
        return kind

    monkeypatch.setattr(_io, "_file_kind", kind_then_replace)
    holder = RouterHolder(router_path, device="cpu")
    assert replaced and os.fspath(replaced[0]) != os.fspath(router_path)
    assert list(holder.current.classes) == list(routers[0].classes_)
    # The file changed since the stamp was taken: the watcher reloads it.
    assert holder.changed()


def test_a_leading_tilde_is_expanded(tmp_path, routers, monkeypatch):
    """'~' was passed on as a folder name by load_gateway_config (and
    ``--config``) and by the router's path: "No such file" for a file in
    the home folder. Messages keep the path as given."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    routers[0].save(home / "router.safetensors")
    name = routers[0].classes_[0]
    (home / "gateway.yaml").write_text(
        yaml.safe_dump({"backends": {name: {"base_url": "http://127.0.0.1:9/v1"}}})
    )
    config = load_gateway_config("~/gateway.yaml")
    assert list(config.backends) == [name]
    with pytest.raises(FileNotFoundError, match=r"'~/missing\.yaml'"):
        load_gateway_config("~/missing.yaml")
    app = create_app("~/router.safetensors", gateway="~/gateway.yaml", device="cpu")
    with TestClient(app) as client:
        health = client.get("/healthz").json()
        assert health["router"]["path"] == str(home / "router.safetensors")
        assert client.post("/admin/reload").status_code == 200


def test_gateway_config_path_that_is_not_a_file_says_what_it_is(tmp_path):
    """A folder, a named pipe or a symbolic link loop was "No such gateway
    configuration file" (is_file() swallowed the reason); a pipe is refused
    before it is opened (which would block)."""
    folder = tmp_path / "gateway.yaml"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        load_gateway_config(folder)
    assert str(info.value) == (
        f"The gateway configuration {str(folder)!r} is a folder; give the path "
        "of a YAML or JSON file."
    )
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.yaml"
        os.mkfifo(fifo)
        with pytest.raises(OSError, match=r"is a named pipe \(FIFO\), not a regular"):
            load_gateway_config(fifo)
    loop = tmp_path / "l1.yaml"
    os.symlink("l2.yaml", loop)
    os.symlink("l1.yaml", tmp_path / "l2.yaml")
    with pytest.raises(OSError) as info:
        load_gateway_config(str(loop))
    assert not isinstance(info.value, FileNotFoundError)
    assert str(info.value).startswith(
        f"Cannot read the gateway configuration file {str(loop)!r}: "
    )
    assert "symbolic links" in str(info.value)
    # Still "No such file" for what is missing, a file on the way included.
    for missing in (tmp_path / "missing.yaml", tmp_path / "l0" / "x.yaml"):
        with pytest.raises(FileNotFoundError, match="No such gateway configuration"):
            load_gateway_config(missing)


def test_a_cross_site_reload_is_refused(router_path, routers, monkeypatch):
    """A web page can POST a text/plain body to a local service without a
    CORS preflight: a reload whose Origin is another host or port, or whose
    Sec-Fetch-Site is cross-site, gets 403 and reloads nothing; clients
    without an Origin (curl, httpx) and same-origin requests still reload."""
    with serve(create_app(router_path)) as url:
        port = url.rsplit(":", 1)[1]
        reload = f"{url}/admin/reload"
        foreign = [
            {"origin": "http://evil.example"},
            {"origin": f"http://localhost:{port}"},  # another host
            {"origin": "http://127.0.0.1:1"},  # another port
            {"origin": f"https://127.0.0.1:{port}x"},  # not a port
            {"origin": "null"},  # a sandboxed page, a file:// page
            {"sec-fetch-site": "cross-site"},
        ]
        for headers in foreign:
            headers = {"content-type": "text/plain", **headers}
            response = httpx.post(reload, content=b"x", headers=headers)
            assert response.status_code == 403, (headers, response.text)
            error = response.json()["error"]
            assert error["type"] == "permission_error"
            assert error["message"].startswith("Reload refused: ")
            if "origin" in headers:
                assert error["param"] == "Origin"
                assert repr(headers["origin"]) in error["message"]
                assert repr(f"127.0.0.1:{port}") in error["message"]
            else:
                assert error["param"] == "Sec-Fetch-Site"
        assert httpx.get(f"{url}/healthz").json()["router"]["version"] == 1
        assert httpx.post(reload).status_code == 200
        same = {"origin": f"http://127.0.0.1:{port}", "sec-fetch-site": "same-origin"}
        assert httpx.post(reload, headers=same).status_code == 200
        assert httpx.get(f"{url}/healthz").json()["router"]["version"] == 3
        # /route is not an admin endpoint: a page may route.
        response = httpx.post(
            f"{url}/route",
            json={"query": "q000"},
            headers={"origin": "http://evil.example"},
        )
        assert response.status_code == 200


def test_a_cross_site_reload_is_refused_with_a_token(router_path, monkeypatch):
    monkeypatch.setenv("LOCUS_TEST_ADMIN", "s3cret")
    app = create_app(router_path, admin_token_env="LOCUS_TEST_ADMIN")
    right = {"authorization": "Bearer s3cret"}
    with TestClient(app) as client:  # Host: testserver
        response = client.post(
            "/admin/reload", headers={**right, "origin": "http://evil.example"}
        )
        assert response.status_code == 403
        assert client.post("/admin/reload", headers=right).status_code == 200
        same = {**right, "origin": "http://testserver"}
        assert client.post("/admin/reload", headers=same).status_code == 200
        assert client.post("/admin/reload").status_code == 401


def test_head_is_answered_where_get_is(router_path):
    """HEAD /healthz and HEAD /models were 405 (health checkers send HEAD):
    now GET's status and headers, with no body, on a running service and on
    one whose /healthz is 503."""
    app = create_app(router_path)
    for running in (True, False):
        client = TestClient(app)
        with client if running else contextlib.nullcontext():
            for path in ("/healthz", "/models", "/models?embeddings=true"):
                get, head = client.get(path), client.head(path)
                expected = 200 if running or path != "/healthz" else 503
                assert get.status_code == head.status_code == expected, path
                assert head.content == b""
                for header in ("content-type", "content-length"):
                    assert head.headers[header] == get.headers[header]
            # A POST-only endpoint stays so, for HEAD as for GET.
            head = client.head("/route")
            assert head.status_code == 405 and head.content == b""
    with serve(app) as url:
        response = httpx.head(f"{url}/healthz")
        assert response.status_code == 200 and response.content == b""


def test_a_replaced_router_is_freed_while_the_service_is_idle(router_path, routers):
    # The batcher's loop kept the last batch's router state in its locals
    # while it waited for the next request: after a reload an idle service
    # held the old router (network, pool, readout) until traffic resumed.
    import gc
    import weakref

    app = create_app(router_path)
    holder = app.state.service.holder
    with TestClient(app) as client:
        assert client.post("/route", json={"query": "q000"}).status_code == 200
        served = weakref.ref(holder.current.router)
        routers[1].save(router_path)
        assert client.post("/admin/reload").status_code == 200
        for _ in range(50):  # the batcher's loop runs on the service's own loop
            gc.collect()
            if served() is None:
                break
            time.sleep(0.02)
        assert served() is None
