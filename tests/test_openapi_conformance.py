"""What the service answers, checked against what its ``/openapi.json`` says.

Every request here is written by hand and sent through ``TestClient``; the
fake model backend listens on 127.0.0.1. The answers are validated against
the served schema by the small JSON Schema validator below (the keywords the
schema uses, with JSON Schema 2020-12's meaning, as OpenAPI 3.1 has it: 2.0
is an integer), which refuses a keyword it does not know rather than skip it.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from conftest import TINY  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter  # noqa: E402
from locus_sklearn.datasets import make_model_pool  # noqa: E402
from locus_sklearn.serve import create_app  # noqa: E402

# ------------------------------------------------------- a JSON Schema check
_ANNOTATIONS = {"title", "description", "default", "examples"}


def _is(instance, kind):
    if kind == "null":
        return instance is None
    if kind == "boolean":
        return isinstance(instance, bool)
    if kind == "string":
        return isinstance(instance, str)
    if kind == "array":
        return isinstance(instance, list)
    if kind == "object":
        return isinstance(instance, dict)
    number = isinstance(instance, (int, float)) and not isinstance(instance, bool)
    if kind == "number":
        return number
    if kind == "integer":
        return number and float(instance).is_integer()
    raise AssertionError(f"unknown type {kind!r}")


def _errors(instance, schema, root, where="$"):
    """What ``instance`` breaks of ``schema`` (a list of messages)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{where}: nothing is allowed here"]
    errors = []
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "$ref":
            target = root
            for part in value.removeprefix("#/").split("/"):
                target = target[part]
            errors += _errors(instance, target, root, where)
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not any(_is(instance, kind) for kind in kinds):
                errors.append(f"{where}: {instance!r:.60} is not of type {value}")
        elif key == "enum":
            if instance not in value:
                errors.append(f"{where}: {instance!r:.60} is not one of {value}")
        elif key == "const":
            if instance != value:
                errors.append(f"{where}: {instance!r:.60} is not {value!r}")
        elif key == "anyOf":
            if all(_errors(instance, member, root, where) for member in value):
                errors.append(f"{where}: matches none of anyOf")
        elif key == "oneOf":
            matched = [not _errors(instance, member, root, where) for member in value]
            if sum(matched) != 1:
                errors.append(f"{where}: matches {sum(matched)} of oneOf, not 1")
        elif key == "allOf":
            for member in value:
                errors += _errors(instance, member, root, where)
        elif key == "not":
            if not _errors(instance, value, root, where):
                errors.append(f"{where}: matches what 'not' refuses")
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if _is(instance, "number"):
                ok = {
                    "minimum": instance >= value,
                    "maximum": instance <= value,
                    "exclusiveMinimum": instance > value,
                    "exclusiveMaximum": instance < value,
                }[key]
                if not ok:
                    errors.append(f"{where}: {instance!r} breaks {key} {value}")
        elif key in ("minLength", "maxLength"):
            if isinstance(instance, str):
                ok = (
                    len(instance) >= value
                    if key == "minLength"
                    else len(instance) <= value
                )
                if not ok:
                    errors.append(f"{where}: {len(instance)} characters, {key} {value}")
        elif key in ("minItems", "maxItems", "uniqueItems", "items"):
            if not isinstance(instance, list):
                continue
            if key == "minItems" and len(instance) < value:
                errors.append(f"{where}: {len(instance)} items, minItems {value}")
            if key == "maxItems" and len(instance) > value:
                errors.append(f"{where}: {len(instance)} items, maxItems {value}")
            if key == "uniqueItems" and value:
                seen = [json.dumps(item, sort_keys=True) for item in instance]
                if len(set(seen)) != len(seen):
                    errors.append(f"{where}: items repeat")
            if key == "items":
                for i, item in enumerate(instance):
                    errors += _errors(item, value, root, f"{where}[{i}]")
        elif key in ("properties", "required", "additionalProperties"):
            if not isinstance(instance, dict):
                continue
            if key == "required":
                errors += [
                    f"{where}: {k!r} is required" for k in value if k not in instance
                ]
            if key == "properties":
                for name, member in value.items():
                    if name in instance:
                        errors += _errors(
                            instance[name], member, root, f"{where}.{name}"
                        )
            if key == "additionalProperties":
                known = schema.get("properties", {})
                for name in instance.keys() - known.keys():
                    errors += _errors(instance[name], value, root, f"{where}.{name}")
        else:
            raise AssertionError(f"{where}: the check does not know {key!r}")
    return errors


def _validate(instance, schema, root):
    errors = _errors(instance, schema, root)
    assert not errors, errors


def _valid(instance, schema, root):
    return not _errors(instance, schema, root)


def test_the_check_reads_schemas_as_json_schema_does():
    """The validator itself, on cases worked out by hand."""
    root = {"components": {"schemas": {"A": {"type": "integer", "maximum": 3}}}}
    ref = {"$ref": "#/components/schemas/A"}
    assert _valid(2, ref, root) and _valid(2.0, ref, root)  # 2020-12: 2.0 is one
    assert not _valid(2.5, ref, root) and not _valid(4, ref, root)
    assert not _valid(True, ref, root) and not _valid("2", ref, root)
    one = {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert _valid({"a": 1}, one, root) and not _valid({"a": 1, "b": 2}, one, root)
    assert not _valid({}, one, root)
    closed = {"properties": {"a": {}}, "additionalProperties": False}
    assert _valid({"a": 1}, closed, root) and not _valid({"b": 1}, closed, root)
    assert not _valid(["x", "x"], {"uniqueItems": True}, root)
    with pytest.raises(AssertionError, match="does not know 'pattern'"):
        _valid("x", {"pattern": "x"}, root)


def _declared(spec, method, path, status):
    """The response ``spec`` declares for ``status``: its own, else its range."""
    answers = spec["paths"][path][method.lower()]["responses"]
    for key in (str(status), f"{str(status)[0]}XX"):
        if key in answers:
            return answers[key]
    raise AssertionError(
        f"{method} {path}: {status} is not declared ({sorted(answers)})"
    )


def _conforms(spec, method, path, response):
    """Assert ``response`` is declared for ``method path`` with a described
    (non-empty) schema for its content type, and matches it."""
    answer = _declared(spec, method, path, response.status_code)
    media = response.headers["content-type"].split(";")[0].strip()
    content = answer.get("content", {})
    assert media in content, (method, path, response.status_code, media, content)
    schema = content[media].get("schema")
    assert schema, f"{method} {path} {response.status_code}: {media} is undescribed"
    body = response.json() if media == "application/json" else response.text
    errors = _errors(body, schema, spec)
    assert not errors, (method, path, response.status_code, errors, body)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pool():
    return make_model_pool(n_models=5, n_queries=60, evals_per_model=40, random_state=0)


@pytest.fixture(scope="module")
def fitted(pool):
    return LocusRouter(
        LocusEmbedder(pool.encodings, **{**TINY, "max_epochs": 1, "random_state": 0}),
        shrinkage=None,
    ).fit(
        pool.evals,
        model_costs={m: pool.n_params[m] for m in pool.evals["model"].unique()},
    )


@pytest.fixture
def router_path(tmp_path, fitted):
    path = tmp_path / "router.safetensors"
    fitted.save(path)
    return path


@pytest.fixture(scope="module")
def queries(pool):
    return sorted(pool.evals["query"].unique())[:4]


class Backend:
    """One loopback HTTP server playing an OpenAI-compatible API per model:
    ``answers[model] = (status, content_type, payload)`` answers that as it
    is; otherwise a chat completion, streamed when the request asks."""

    def __init__(self):
        self.answers = {}
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                model = self.path.strip("/").split("/")[0]
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if model in backend.answers:
                    status, content_type, payload = backend.answers[model]
                elif body.get("stream"):
                    event = {"choices": [{"delta": {"content": f"from {model}"}}]}
                    payload = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
                    status, content_type = 200, "text/event-stream"
                else:
                    message = {"role": "assistant", "content": f"from {model}"}
                    payload = json.dumps(
                        {
                            "id": "c1",
                            "object": "chat.completion",
                            "model": body["model"],
                            "choices": [{"index": 0, "message": message}],
                        }
                    ).encode()
                    status, content_type = 200, "application/json"
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def config(self, models):
        port = self.server.server_address[1]
        return {
            "backends": {
                m: {
                    "base_url": f"http://127.0.0.1:{port}/{m}/v1",
                    "model": f"{m}-chat",
                    "timeout": 5.0,
                }
                for m in models
            },
            "fallback": {"max_attempts": 2, "deadline": 10.0},
        }


@pytest.fixture
def backend():
    fake = Backend()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _chat(model, text="hi", **extra):
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


# --------------------------------------------------------------------- tests
def test_every_operation_declares_the_body_limit_errors(router_path, fitted, backend):
    """The BodyLimit middleware runs before any route: a body over
    max_body_bytes is a 413 and a Content-Length that is not an integer a
    400 on every path. Both were undeclared on /admin/reload, /models,
    /healthz and /v1/models."""
    app = create_app(
        router_path, gateway=backend.config(fitted.classes_), max_body_bytes=100
    )
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        operations = [
            (method.upper(), path)
            for path, methods in spec["paths"].items()
            for method in methods
        ]
        assert sorted(operations) == [
            ("GET", "/healthz"),
            ("GET", "/models"),
            ("GET", "/v1/models"),
            ("POST", "/admin/reload"),
            ("POST", "/route"),
            ("POST", "/v1/chat/completions"),
        ]
        json_type = {"content-type": "application/json"}
        for method, path in operations:
            big = client.request(method, path, content=b"1" * 101, headers=json_type)
            assert big.status_code == 413, (path, big.text)
            assert big.json()["error"] == {
                "message": "The request body is larger than the limit of 100 bytes.",
                "type": "invalid_request_error",
                "param": "body",
            }
            _conforms(spec, method, path, big)
            bad = client.request(
                method, path, content=b"1", headers={**json_type, "content-length": "x"}
            )
            assert bad.status_code == 400, (path, bad.text)
            assert bad.json()["error"]["message"] == "Content-Length is not an integer."
            _conforms(spec, method, path, bad)


def test_route_request_schema_says_what_route_refuses(router_path, fitted, queries):
    """A body valid under the served RouteRequest schema is answered 200 and
    one it refuses is a 422: exactly one of query/queries (not null), models
    each once, and this app's max_queries and max_query_chars. A 2.0 top_k
    is the one documented exception: JSON Schema counts it as an integer,
    the strict service refuses it as it refuses "2" (and says so)."""
    models = [str(m) for m in fitted.classes_]
    q0, q1 = queries[:2]
    app = create_app(router_path, max_queries=3, max_query_chars=40)
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        schema = {"$ref": "#/components/schemas/RouteRequest"}
        cases = {
            "nothing": ({}, 422),
            "both": ({"query": q0, "queries": [q1]}, 422),
            "both null": ({"query": None, "queries": None}, 422),
            "query, queries null": ({"query": q0, "queries": None}, 200),
            "queries, query null": ({"query": None, "queries": [q0, q1]}, 200),
            "repeated model": ({"query": q0, "models": [models[0]] * 2}, 422),
            "two models": ({"query": q0, "models": models[:2]}, 200),
            "max_queries": ({"queries": [q0, q1, q0]}, 200),
            "over max_queries": ({"queries": [q0, q1, q0, q1]}, 422),
            "over max_query_chars": ({"query": "x" * 41}, 422),
            "over, in queries": ({"queries": [q0, "x" * 41]}, 422),
            "top_k": ({"query": q0, "top_k": 2}, 200),
        }
        for name, (body, status) in cases.items():
            response = client.post("/route", json=body)
            assert response.status_code == status, (name, response.text)
            assert _valid(body, schema, spec) == (status == 200), name
            _conforms(spec, "POST", "/route", response)
        # The exception, documented where the field is.
        top_k = spec["components"]["schemas"]["RouteRequest"]["properties"]["top_k"]
        assert "2.0 is refused" in top_k["description"]
        assert _valid({"query": q0, "top_k": 2.0}, schema, spec)
        response = client.post("/route", json={"query": q0, "top_k": 2.0})
        assert response.status_code == 422
        assert response.json()["error"] == {
            "message": "top_k: Input should be a valid integer (got 2.0)",
            "type": "invalid_request_error",
            "param": "top_k",
        }
    # The limits are each app's own.
    default = create_app(router_path).openapi()["components"]["schemas"]
    queries_field = default["RouteRequest"]["properties"]["queries"]["anyOf"][0]
    assert (queries_field["maxItems"], queries_field["items"]["maxLength"]) == (
        256,
        100_000,
    )


@pytest.mark.parametrize(
    ("status", "content_type", "sent", "error"),
    [
        # vLLM: OpenAI's error fields, but at the top level.
        (
            404,
            "application/json",
            {
                "object": "error",
                "message": "No model x.",
                "type": "NotFound",
                "code": 404,
            },
            "No model x.",
        ),
        # Ollama: the message is the error itself.
        (
            400,
            "application/json",
            {"error": "model 'x' not found"},
            "model 'x' not found",
        ),
        # A FastAPI backend: no message; the body as JSON text.
        (
            422,
            "application/json",
            {"detail": [{"loc": ["body", "x"], "msg": "bad"}]},
            '{"detail": [{"loc": ["body", "x"], "msg": "bad"}]}',
        ),
        (400, "application/json", {"error": {"code": 7}}, '{"error": {"code": 7}}'),
    ],
)
def test_a_backend_error_without_a_message_is_wrapped(
    router_path, fitted, backend, status, content_type, sent, error
):
    """A backend's 4xx JSON without an ``error`` object holding a message was
    relayed as it was: no error.message for an OpenAI client to read, under
    statuses (401, 422) the schema did not declare. It is wrapped, the
    backend's body kept under error.backend_body, with the locus field."""
    model = str(fitted.classes_[0])
    backend.answers[model] = (status, content_type, json.dumps(sent).encode())
    app = create_app(router_path, gateway=backend.config(fitted.classes_))
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        response = client.post("/v1/chat/completions", json=_chat(model))
    assert response.status_code == status
    assert response.json() == {
        "error": {
            "message": error,
            "type": "backend_error",
            "param": None,
            "backend_body": sent,
        },
        "locus": {"model": model, "routed_model": model, "failed": []},
    }
    assert response.headers["x-locus-model"] == model
    _conforms(spec, "POST", "/v1/chat/completions", response)


@pytest.mark.parametrize(
    ("status", "content_type", "sent", "relayed"),
    [
        # OpenAI's own error object, with its extra code: kept as it is.
        (
            401,
            "application/json",
            b'{"error": {"message": "Incorrect API key", "type": "invalid_request_'
            b'error", "param": null, "code": "invalid_api_key"}}',
            {
                "message": "Incorrect API key",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            },
        ),
        # A message alone: type and param filled in.
        (
            403,
            "application/json",
            b'{"error": {"message": "forbidden"}}',
            {"message": "forbidden", "type": "backend_error", "param": None},
        ),
        # Not JSON: the text is the message.
        (
            403,
            "text/plain",
            b"Forbidden",
            {"message": "Forbidden", "type": "backend_error", "param": None},
        ),
        # Azure's content filter: type null. The message is kept (it was
        # replaced by the whole body's JSON text), type set, the original kept.
        (
            400,
            "application/json",
            b'{"error": {"message": "The response was filtered", "type": null, '
            b'"param": "prompt", "code": "content_filter"}}',
            {
                "message": "The response was filtered",
                "type": "backend_error",
                "param": "prompt",
                "code": "content_filter",
                "backend_body": {
                    "error": {
                        "message": "The response was filtered",
                        "type": None,
                        "param": "prompt",
                        "code": "content_filter",
                    }
                },
            },
        ),
        # A param that is no string, and a key of the gateway's own with
        # another type: moved under backend_body, the declared shape kept.
        (
            422,
            "application/json",
            b'{"error": {"message": "bad", "type": "t", "param": 3, '
            b'"attempts": "many"}}',
            {
                "message": "bad",
                "type": "t",
                "param": None,
                "backend_body": {
                    "error": {
                        "message": "bad",
                        "type": "t",
                        "param": 3,
                        "attempts": "many",
                    }
                },
            },
        ),
    ],
)
def test_a_backend_error_object_is_relayed_with_the_locus_field(
    router_path, fitted, backend, status, content_type, sent, relayed
):
    model = str(fitted.classes_[1])
    backend.answers[model] = (status, content_type, sent)
    app = create_app(router_path, gateway=backend.config(fitted.classes_))
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        response = client.post("/v1/chat/completions", json=_chat(model))
    assert response.status_code == status
    assert response.json() == {
        "error": relayed,
        "locus": {"model": model, "routed_model": model, "failed": []},
    }
    _conforms(spec, "POST", "/v1/chat/completions", response)
    # The range the relayed statuses fall under, apart from their own.
    relayed_schema = _declared(spec, "POST", "/v1/chat/completions", 418)
    ref = relayed_schema["content"]["application/json"]["schema"]["$ref"]
    assert spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["required"] == [
        "error",
        "locus",
    ]


def test_successful_answers_match_their_schemas(router_path, fitted, backend, queries):
    """Every 200 (and /healthz's 503) is described by a schema of its own,
    not ``{}``, and the answers match it; a streamed chat answer is declared
    as text/event-stream."""
    models = [str(m) for m in fitted.classes_]
    q0, q1 = queries[:2]
    app = create_app(router_path, gateway=backend.config(models))
    # Not started: /healthz answers 503, with the health body.
    unstarted = TestClient(app).get("/healthz")
    assert unstarted.status_code == 503
    assert unstarted.json()["status"] == "unavailable"
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
        _conforms(spec, "GET", "/healthz", unstarted)
        for method, path, body in [
            ("POST", "/route", {"query": q0}),
            ("POST", "/route", {"queries": [q0, q1], "return_proba": False}),
            ("POST", "/route", {"query": q0, "models": models[:2], "top_k": 1}),
            ("GET", "/models", None),
            ("GET", "/models?embeddings=true", None),
            ("GET", "/healthz", None),
            ("POST", "/admin/reload", None),
            ("GET", "/v1/models", None),
            ("POST", "/v1/chat/completions", _chat("locus", q0)),
            ("POST", "/v1/chat/completions", _chat(models[0], stream=True)),
        ]:
            response = client.request(method, path, json=body)
            assert response.status_code == 200, (path, response.text)
            _conforms(spec, method, path.split("?")[0], response)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.text.endswith("data: [DONE]\n\n")
        # Keys left out, not sent as null: the schema does not require them.
        answer = client.post("/route", json={"query": q0, "return_proba": False})
        assert "proba" not in answer.json()["results"][0]
        result = spec["components"]["schemas"]["RouteResult"]
        assert "proba" in result["properties"] and "proba" not in result["required"]


def test_a_query_parameter_error_names_the_parameter(router_path):
    """``param`` was ``query.embeddings`` (FastAPI's location and name),
    which reads as a field of /route's body field ``query``."""
    with TestClient(create_app(router_path)) as client:
        spec = client.get("/openapi.json").json()
        response = client.get("/models?embeddings=maybe")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "message": "embeddings: Input should be a valid boolean, unable to "
        "interpret input (got 'maybe')",
        "type": "invalid_request_error",
        "param": "embeddings",
    }
    _conforms(spec, "GET", "/models", response)


def test_a_405_allows_head_wherever_get_is_served(router_path, fitted, backend):
    """HEAD is answered wherever GET is (HeadAsGet), so a 405's Allow says
    ``GET, HEAD`` there (RFC 9110); a POST-only endpoint still allows POST."""
    app = create_app(router_path, gateway=backend.config(fitted.classes_))
    with TestClient(app) as client:
        for path in ("/healthz", "/models", "/v1/models"):
            response = client.post(path)
            assert response.status_code == 405, path
            assert response.headers["allow"] == "GET, HEAD", path
            assert response.json()["error"]["type"] == "http_error"
            assert client.head(path).status_code == 200, path
        for path in ("/route", "/admin/reload", "/v1/chat/completions"):
            response = client.get(path)
            assert response.status_code == 405, path
            assert response.headers["allow"] == "POST", path
