"""The routing service and the gateway, served for real on 127.0.0.1.

Model backends are real HTTP servers on loopback too; each can be told to
answer, fail with a status, stall, or be absent (connection refused).
"""

import asyncio
import contextlib
import json
import socket
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
from conftest import TINY  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.datasets import make_model_pool  # noqa: E402
from locus_sklearn.inspection import calibrate_cost_weight, fallback_order  # noqa: E402
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

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeBackends:
    """One threaded HTTP server playing an OpenAI-compatible API per model.

    ``modes[model]`` is ``"ok"``, an HTTP status (500, 429, ...) or
    ``"stall"`` (answers after ``stall`` seconds); ``hits[model]`` counts
    requests, ``seen`` keeps (model, headers, body) of each.
    """

    def __init__(self, stall=2.0):
        self.modes = {}
        self.hits = {}
        self.seen = []
        self.stall = stall
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
                if mode != "ok":
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
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
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
                )

            def _send(self, status, obj):
                payload = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

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
def backends():
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
        assert health["router"]["path"] == str(router_path.resolve())


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

    def fn(items):
        calls.append(list(items))
        if len(calls) == 1:
            release.wait(10)  # the first call computes until the test lets go
        return "ctx", np.asarray(items) * 10

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

    (context, rows), later = asyncio.run(scenario())
    assert context == "ctx" and rows.tolist() == [10]
    assert [r.tolist() for _, r in later] == [[20], [30], [40], [50], [60], [70]]
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
        for _ in range(200):
            health = httpx.get(f"{url}/healthz").json()
            if health["router"]["version"] == 2:
                break
            time.sleep(0.05)
        assert health["router"]["version"] == 2
        assert health["router"]["n_models"] == len(routers[1].classes_)


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
        r = post({"model": "locus", "messages": "q000"})
        assert r.status_code == 422 and r.json()["error"]["param"] == "messages"
        r = post(
            {
                "model": "locus",
                "messages": [{"role": "user", "content": "q000"}],
                "models": ["nope"],
            }
        )
        assert r.status_code == 422 and r.json()["error"]["param"] == "models"
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
    assert serve_main([*argv, str(target), "--cv", "1"]) == 1
    assert "cv must be an int in [2" in capsys.readouterr().err

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
    assert "min_accuracy needs scored" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        serve_main(["calibrate", str(router_path), str(text), "--target-share", "0.1"])
    assert exit_info.value.code == 2


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
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert serve_main(["serve", str(router_path)]) == 0
    assert seen["encoder_backend"] == "torch"
    assert serve_main(["serve", str(router_path), "--encoder-backend", "onnx"]) == 0
    assert seen["encoder_backend"] == "onnx"
    with pytest.raises(SystemExit):
        serve_main(["serve", str(router_path), "--encoder-backend", "tensorrt"])
