"""The routing service: ``POST /route``, ``GET /models``, ``GET /healthz``, reload.

Built on FastAPI: requests are validated by pydantic models (a bad field gets
a 4xx JSON error naming it) and the OpenAPI schema is served at ``/docs``.
"""

import asyncio
import contextlib
import email.message
import hmac
import json
import logging
import math
import numbers
import os
import re
import sys
from typing import Literal
from urllib.parse import urlsplit

import numpy as np

from ._deps import require

require("fastapi")
require("httpx")

import httpx  # noqa: E402
from fastapi import FastAPI, Query, Request  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from fastapi.routing import APIRoute  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, model_validator  # noqa: E402
from starlette.exceptions import HTTPException  # noqa: E402

from .._base import check_model_subset  # noqa: E402
from ..inspection._cost import _utility  # noqa: E402
from ..metrics import route  # noqa: E402
from ._batching import MAX_WINDOW_MS, BatcherStopped, MicroBatcher  # noqa: E402
from ._config import _unique_keys, load_gateway_config  # noqa: E402
from ._state import RouterHolder, _unsendable  # noqa: E402

__all__ = ["create_app", "APIError"]

logger = logging.getLogger("locus_sklearn.serve")


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param"}}``."""

    def __init__(
        self,
        status,
        message,
        *,
        param=None,
        kind="invalid_request_error",
        headers=None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.headers = headers


class _JSONAnswer(JSONResponse):
    """A JSON answer: as UTF-8, or where it holds a lone surrogate with ASCII
    escapes (``"\\udce9"``), which give the client the same JSON value.

    The library keeps a model name read from bytes that are not UTF-8 as
    such a surrogate (``"mod\\udce8le"``), and UTF-8 cannot encode one:
    with starlette's own ``render``, ``GET /models`` and every ``/route``
    listing that model would answer 500. The service's answers all use it
    (``default_response_class``), and the gateway relays backends' answers
    with it (a backend may send such an escape).
    """

    def render(self, content):
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode(
                "ascii"
            )


def error_response(
    status,
    message,
    *,
    param=None,
    kind="invalid_request_error",
    headers=None,
    **extra,
):
    """The OpenAI error shape, so OpenAI clients show the message."""
    body = {"error": {"message": message, "type": kind, "param": param, **extra}}
    return _JSONAnswer(body, status_code=status, headers=headers)


class ErrorDetail(BaseModel):
    """What went wrong: OpenAI's error object."""

    model_config = ConfigDict(extra="allow")

    message: str = Field(description="What went wrong, naming the field.")
    type: str = Field(
        description="invalid_request_error, server_error, backend_error, ..."
    )
    param: str | None = Field(
        description="The field at fault (``queries.0``, ``body``), or null."
    )
    attempts: list[dict] | None = Field(
        default=None,
        description="Gateway only (502, 504): each backend tried and its error.",
    )
    routed_model: str | None = Field(
        default=None, description="Gateway only: the model the request was routed to."
    )
    backend_body: dict | None = Field(
        default=None,
        description="Gateway only (a backend's 4xx, relayed): the backend's own "
        "JSON body, where it was not an error object with a message.",
    )


class ErrorBody(BaseModel):
    """The body of every error answer (any 4xx or 5xx)."""

    error: ErrorDetail


# The answers of the endpoints, for the OpenAPI schema only (``responses=``):
# each endpoint writes its answer itself, so declaring them changes no
# answer's bytes (a ``response_model`` would validate and re-encode each).


def _optional_key(schema):
    """A key left out of the answer, never sent as null: no default shown."""
    schema.pop("default", None)


class RouterSummary(BaseModel):
    """The served router."""

    version: int = Field(description="1 at start, one more at each reload.")
    loaded_at: str = Field(description="When this version loaded (ISO 8601, UTC).")
    n_models: int = Field(description="Models in the pool.")
    cost_weight: float = Field(
        description="The cost_weight a request gets by default: the gateway "
        "configuration's, else the router's."
    )
    has_costs: bool = Field(description="Whether the router has model costs.")


class TopModel(BaseModel):
    model: str
    proba: float = Field(description="P(correct).")
    utility: float = Field(description="P(correct) - cost_weight * cost.")


class RouteResult(BaseModel):
    model: str = Field(description="The routed model.")
    proba_routed: float = Field(description="Its P(correct).")
    top: list[TopModel] = Field(description="The top_k models by utility.")
    proba: dict[str, float] = Field(
        default=None,
        description="P(correct) of every model; with return_proba only.",
        json_schema_extra=_optional_key,
    )


class RouteAnswer(BaseModel):
    """The answer of ``POST /route``: one result per query, in order."""

    results: list[RouteResult]
    cost_weight: float = Field(description="The cost_weight the request got.")
    router_version: int = Field(description="The router version that answered.")


class PoolModel(BaseModel):
    name: str
    cost: float | None = Field(description="Its cost, or null without costs.")
    backend: bool = Field(description="Whether the gateway has a backend for it.")
    embedding: list[float] = Field(
        default=None,
        description="The model embedding; with ?embeddings=true only.",
        json_schema_extra=_optional_key,
    )


class PoolAnswer(RouterSummary):
    """The answer of ``GET /models``: the pool and the served router."""

    models: list[PoolModel]


class ServedRouter(RouterSummary):
    path: str = Field(description="The router file.")


class BatchingCounters(BaseModel):
    batches: int = Field(description="Predictor calls.")
    queries: int = Field(description="Queries those calls computed.")
    requests: int = Field(description="Requests answered through the batcher.")
    max_batch: int
    window_ms: float


class HealthBody(BaseModel):
    """The answer of ``GET /healthz``, with 200 or 503."""

    status: Literal["ok", "unavailable"]
    reason: str = Field(
        default=None,
        description="Why the service cannot answer; with 'unavailable' only.",
        json_schema_extra=_optional_key,
    )
    router: ServedRouter
    batching: BatchingCounters
    reloads: int = Field(description="Successful reloads since start.")
    last_reload_error: str | None = Field(
        description="Why the last reload failed, or null if it succeeded."
    )


class ReloadAnswer(RouterSummary):
    """The answer of a successful ``POST /admin/reload``: the new router."""

    status: Literal["reloaded"]
    previous_version: int
    added: list[str] = Field(description="Models the new pool adds.")
    removed: list[str] = Field(description="Models the new pool drops.")


_ERROR_DESCRIPTIONS = {
    400: "The body is not standard UTF-8 JSON",
    401: "The admin token is missing or wrong",
    403: "The request came from a web page of another site (Origin, Sec-Fetch-Site)",
    404: "The model is neither 'locus' nor a served model",
    409: "The router file did not load; the old router keeps serving",
    413: "The body is over the size limit",
    415: "The body was not sent as JSON",
    422: "A field is invalid",
    502: "No backend answered",
    503: "The service is not started, is shutting down, or is overloaded",
    504: "No backend answered before the deadline",
}


def _error_responses(*statuses, descriptions=None):
    """``responses=`` for a route: each status answers an :class:`ErrorBody`
    (declaring 422 replaces FastAPI's ``HTTPValidationError``, which this
    service never sends; :func:`_without_unsent_422` drops it from a route
    that declares none). ``descriptions`` overrides the default ones."""
    descriptions = {**_ERROR_DESCRIPTIONS, **(descriptions or {})}
    return {
        status: {"model": ErrorBody, "description": descriptions[status]}
        for status in statuses
    }


_FASTAPI_422 = {"$ref": "#/components/schemas/HTTPValidationError"}

# What the BodyLimit middleware answers on every path, whatever the route.
_BODY_LIMIT_ERRORS = {
    "400": "Content-Length is not an integer",
    "413": _ERROR_DESCRIPTIONS[413],
}


def _branch(field, kind):
    """The member of JSON type ``kind`` of a nullable field's ``anyOf``."""
    return next(member for member in field["anyOf"] if member.get("type") == kind)


def _openapi_as_answered(app, service):
    """Make ``app.openapi`` declare what the app answers.

    It leaves out the 422 FastAPI declares on a route with a body that
    declares none (its ``HTTPValidationError``, which this service never
    sends: the gateway answers an invalid request with 400); it declares the
    400 and 413 of the :class:`BodyLimit` middleware, which runs before any
    route, on every operation; and it gives ``RouteRequest`` this app's
    ``max_queries`` and ``max_query_chars``, set when the app is built.
    """
    default = app.openapi

    def openapi():
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = default()
        error_body = {
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
        }
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                answers = operation.setdefault("responses", {})
                sent = answers.get("422", {}).get("content", {})
                if sent.get("application/json", {}).get("schema") == _FASTAPI_422:
                    del answers["422"]
                for status, description in _BODY_LIMIT_ERRORS.items():
                    answers.setdefault(
                        status, {"description": description, "content": error_body}
                    )
        schemas = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        fields = schemas["RouteRequest"]["properties"]
        _branch(fields["query"], "string")["maxLength"] = service.max_query_chars
        queries = _branch(fields["queries"], "array")
        queries["maxItems"] = service.max_queries
        queries["items"]["maxLength"] = service.max_query_chars
        return schema

    app.openapi = openapi


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _out_of_range(text):
    shown = text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
    return ValueError(
        f"the number {shown} is out of range (a number must be finite, at most "
        "about 1.8e308 in magnitude)"
    )


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise _out_of_range(text)
    return value


# Digits of the largest double, about 1.8e308: an integer with more is
# beyond it, and is refused without converting it.
_MAX_DOUBLE_DIGITS = len(str(int(sys.float_info.max)))


def _finite_int(text):
    """An integer literal, refused like ``1e400`` where it is beyond a
    double's range (it would round to infinity as a double, as a backend's
    JSON parser may read it); the longest are refused unconverted, as
    Python's own refusal of one over 4300 digits would advise the client to
    raise the server's limit."""
    if len(text.lstrip("-")) > _MAX_DOUBLE_DIGITS:
        raise _out_of_range(text)
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise _out_of_range(text) from None
    return value


# How many levels arrays and objects may nest in a request body or a
# backend's answer. What parses is encoded again deeper in the stack than it
# was parsed (httpx's json.dumps of the forwarded request, the rendering of
# the relayed answer), so a bound left to the interpreter's recursion limit
# (1000 frames by default) let through values that parsed but then failed to
# encode (a 500). This one leaves hundreds of frames to spare, and is far
# beyond the nesting of any real request or answer.
MAX_JSON_DEPTH = 128

_TOO_DEEP = (
    f"too deeply nested (arrays and objects may nest at most {MAX_JSON_DEPTH} "
    "levels deep)"
)


def _too_deep(value):
    """Whether arrays and objects nest more than MAX_JSON_DEPTH levels in the
    parsed ``value`` (walked without recursion)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                if depth == MAX_JSON_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


def _strict_json(content):
    """``content`` (str or UTF-8 bytes) parsed as standard JSON.

    Refuses what Python's parser lets through, with a ValueError naming it:
    ``NaN`` and ``Infinity`` (not JSON), a number beyond a double's range
    (``1e400``, read as infinity, or an integer such as ``1`` followed by
    400 zeros) and a key repeated in one object, nested ones included (read
    as its last value). None of them could be routed on or written on as
    JSON. So is nesting more than :data:`MAX_JSON_DEPTH` levels deep, which
    could not be encoded again.
    """
    try:
        value = json.loads(
            content,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_finite_int,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    # Each level opens a bracket: with no more brackets than levels allowed
    # (most bodies), the walk is skipped.
    opened = (b"[", b"{") if isinstance(content, bytes) else ("[", "{")
    if sum(map(content.count, opened)) > MAX_JSON_DEPTH and _too_deep(value):
        raise ValueError(_TOO_DEEP)
    return value


def _is_json_type(content_type):
    """``application/json`` or ``application/*+json`` (parameters ignored)."""
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _has_body(headers):
    if "transfer-encoding" in headers:
        return True
    try:
        return int(headers.get("content-length", "0")) > 0
    except ValueError:
        return True


# A JSON escape that can make a lone surrogate: \ud800 to \udfff.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _not_utf8(text):
    """The first lone surrogate in ``text`` (``"\\ud800"``), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x}"
    return None


def _lone_surrogate(value):
    """Where a string of the parsed JSON ``value`` (a key or a value) holds a
    lone surrogate: ``(param, message)``, or None.

    A lone surrogate (``"\\ud800"``) is valid JSON syntax but not Unicode
    text: it cannot be encoded as UTF-8, so it could be neither forwarded
    nor written back in an answer.
    """
    stack = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            found, whose = _not_utf8(item), ""
        elif isinstance(item, dict):
            found = whose = None
            for key in item:
                found = _not_utf8(key)
                if found:
                    whose = f"the key {key!r} of "
                    break
            stack.extend(((*path, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            found = None
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(item))))
        else:
            found = None
        if found:
            where = ".".join(map(str, path)) or "body"
            return where, (
                f"{whose}{where} holds a lone surrogate escape ({found} without "
                "its pair), which is not Unicode text and cannot be encoded as "
                "UTF-8; send the character itself or a valid surrogate pair."
            )
    return None


class _BodyFieldError(HTTPException):
    """A 400 about one field of a body that parsed: raised from
    ``Request.json()``, where FastAPI lets only HTTPException through."""

    def __init__(self, message, param):
        super().__init__(400, message)
        self.param = param


class _StrictJSONRequest(Request):
    """A request whose ``json()`` is :func:`_strict_json` of the body decoded
    as UTF-8 (not UTF-16 or UTF-32, which ``json.loads`` would detect; a
    UTF-8 byte order mark is ignored); its failures reach FastAPI as the
    ``JSONDecodeError`` it answers 400 to (``param: body``). A string holding
    a lone surrogate escape is a 400 naming its field. An empty body sent as
    JSON is malformed JSON too."""

    async def body(self):
        body = await super().body()
        content_type = self.headers.get("content-type")
        if not body and content_type and _is_json_type(content_type):
            # FastAPI calls json() only for a non-empty body, and validates
            # an empty one as a missing body (a 422); raised here, in its
            # read of the body, it is the 400 of any other malformed JSON.
            raise json.JSONDecodeError("it is empty", "", 0)
        return body

    async def json(self):
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                text = body.decode("utf-8-sig")
                if "\x00" in text:
                    # Never valid in JSON text; UTF-16 and UTF-32 are full of it.
                    raise json.JSONDecodeError(
                        "it is not UTF-8 text (it holds NUL bytes, as UTF-16 or "
                        "UTF-32 text does); send the JSON encoded as UTF-8",
                        "",
                        0,
                    )
                data = _strict_json(text)
            except json.JSONDecodeError:
                raise
            except UnicodeDecodeError as exc:
                raise json.JSONDecodeError(
                    f"it is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                    "send the JSON encoded as UTF-8",
                    "",
                    0,
                ) from None
            except ValueError as exc:
                raise json.JSONDecodeError(str(exc), "", 0) from None
            found = _SURROGATE_ESCAPE.search(text) and _lone_surrogate(data)
            if found:
                param, message = found
                raise _BodyFieldError(message, param)
            self._json = data
        return self._json


class _JSONRoute(APIRoute):
    """A route whose JSON body is read strictly, on ``/route`` and the
    gateway alike: a body sent without a JSON content type gets 415 (not
    pydantic's "valid dictionary" 422), and one that is not standard UTF-8
    JSON (NaN, 1e400, a repeated key, invalid bytes) gets 400."""

    def get_route_handler(self):
        handler = super().get_route_handler()
        if getattr(self, "body_field", None) is None:
            return handler

        async def strict_handler(request):
            content_type = request.headers.get("content-type")
            if _has_body(request.headers) and not (
                content_type and _is_json_type(content_type)
            ):
                got = (
                    f"got Content-Type {content_type!r}"
                    if content_type
                    else "the request has no Content-Type"
                )
                raise APIError(
                    415,
                    f"The body must be JSON sent with 'Content-Type: "
                    f"application/json'; {got}.",
                    param="body",
                )
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict_handler


class RouteRequest(BaseModel):
    """Body of ``POST /route``: exactly one of ``query`` and ``queries``.

    Strict: a value of the wrong JSON type (``"top_k": "2"``, ``"cost_weight":
    true``, ``"top_k": 2.0``) is a 422, never converted; an integer is a
    valid number.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        # What _one_of enforces, for clients that validate against the
        # schema: one of the two is given, not null, and the other is not.
        json_schema_extra={
            "oneOf": [
                {
                    "required": [name],
                    "properties": {name: {"not": {"type": "null"}}},
                }
                for name in ("query", "queries")
            ]
        },
    )

    # Empty and blank queries are refused by Service.check_queries, with one
    # message for both; its length limits (max_queries, max_query_chars) are
    # added to the schema by _openapi_as_answered, as each app sets them.
    query: str | None = Field(
        default=None,
        description="One query (not blank; at most max_query_chars characters).",
    )
    queries: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Several queries (texts or ids; at most max_queries, each "
        "not blank and at most max_query_chars characters).",
    )
    models: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Route among these models only, each once.",
        json_schema_extra={"uniqueItems": True},
    )
    cost_weight: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="λ for this request."
    )
    # Strict like every field: a float is never converted, so 2.0 is a 422
    # as "2" is, though JSON Schema counts 2.0 as an integer; the schema
    # cannot say so, the description does.
    top_k: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="How many models top lists, by utility (fewer where fewer "
        "are allowed); an integer written without a fraction (2.0 is refused).",
    )
    return_proba: bool = True

    @model_validator(mode="after")
    def _one_of(self):
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' and 'queries'")
        return self


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413.

    Checks ``Content-Length`` first and counts chunked bodies as they arrive,
    so a huge body is never read into memory.
    """

    def __init__(self, app, max_bytes):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        too_big = error_response(
            413,
            f"The request body is larger than the limit of {self.max_bytes} bytes.",
            param="body",
        )
        if length is not None:
            try:
                if int(length) > self.max_bytes:
                    return await too_big(scope, receive, send)
            except ValueError:
                return await error_response(
                    400, "Content-Length is not an integer.", param="body"
                )(scope, receive, send)
        received = 0
        exceeded = False

        async def limited_receive():
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise _BodyTooLarge()
            return message

        started = False

        async def tracked_send(message):
            nonlocal started
            if exceeded:
                # The app turned the aborted read into its own error (FastAPI
                # answers 400 to any body it cannot read); answer 413 instead.
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await too_big(scope, receive, send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except Exception:
            if not exceeded:
                raise
            if not started:
                await too_big(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


class HeadAsGet:
    """ASGI middleware: answer ``HEAD`` as ``GET`` is answered, without the
    body: the same status and headers (RFC 9110, section 9.3.2). Health
    checkers and load balancers send ``HEAD /healthz``; FastAPI routes take
    only the methods they name, so each got 405."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def headers_only(message):
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        # GET is safe: what it answers is what HEAD describes. The server
        # keeps the request's own method, so it sends no body either.
        await self.app({**scope, "method": "GET"}, receive, headers_only)


# Where FastAPI found a parameter that is not the body: the first item of
# its error's loc. A parameter is named alone (``embeddings``, not
# ``query.embeddings``, which would read as a field of /route's ``query``).
_PARAMETER_SOURCES = ("query", "path", "header", "cookie")


def _param(loc):
    if len(loc) > 1 and loc[0] in _PARAMETER_SOURCES:
        loc = loc[1:]
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def _describe(error):
    """``field: problem (got value)``; the value is left out where it is the
    enclosing object (a missing field) or a whole list or object."""
    text = f"{_param(error['loc'])}: {error['msg']}"
    value = error.get("input")
    if error.get("type") != "missing" and not isinstance(value, (dict, list)):
        text += f" (got {value!r:.80})"
    return text


def _validation_error(exc):
    """``(status, message, param)`` for a RequestValidationError: 400 for a
    body that is not JSON, 422 for a bad field."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    if first.get("type") == "json_invalid":
        problem = first.get("ctx", {}).get("error", "")
        return 400, f"The body is not valid JSON: {problem}".rstrip(": "), "body"
    message = "; ".join(_describe(e) for e in errors)
    return 422, message, _param(first["loc"])


def _install_error_handlers(app):
    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):
        status, message, param = _validation_error(exc)
        return error_response(status, message, param=param)

    @app.exception_handler(APIError)
    async def _api_error(request, exc):
        return error_response(
            exc.status,
            exc.message,
            param=exc.param,
            kind=exc.kind,
            headers=exc.headers,
        )

    @app.exception_handler(HTTPException)
    async def _http(request, exc):
        # Its headers kept: a 405's Allow, say.
        if exc.status_code == 400:
            # FastAPI's answer to a body it could not read: a request error.
            return error_response(
                400,
                str(exc.detail),
                param=getattr(exc, "param", "body"),
                headers=exc.headers,
            )
        headers = exc.headers
        if exc.status_code == 405 and headers and "Allow" in headers:
            # HeadAsGet answers HEAD wherever GET is routed: say so.
            allowed = [method.strip() for method in headers["Allow"].split(",")]
            if "GET" in allowed and "HEAD" not in allowed:
                headers = {**headers, "Allow": ", ".join([*allowed, "HEAD"])}
        return error_response(
            exc.status_code, str(exc.detail), kind="http_error", headers=headers
        )

    @app.exception_handler(Exception)
    async def _internal(request, exc):
        logger.exception("Unhandled error on %s", request.url.path)
        return error_response(
            500, f"Internal error: {type(exc).__name__}", kind="server_error"
        )


def _allowed_mask(state, models, *, param="models"):
    """Boolean mask over the pool for ``models`` (None: every model)."""
    if models is None:
        return np.ones(len(state.classes), dtype=bool)
    try:
        return check_model_subset(models, state.classes, name=param)
    except (TypeError, ValueError) as exc:
        raise APIError(422, str(exc), param=param) from None


def _checked_utility(proba, state, weight, requested, *, param="cost_weight"):
    """``P(correct) - weight * cost``, refused when a huge weight overflows it.

    A non-finite utility cannot be routed on nor written as JSON: the client
    (or the configuration) asked for a weight too large for these costs.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        utility = _utility(proba, state.router.model_costs_, weight)
    if not np.isfinite(utility).all():
        whose = "" if requested else " (the default)"
        raise APIError(
            422,
            f"cost_weight={weight:g}{whose} is too large for the served router's "
            "costs: P(correct) - cost_weight * cost overflows; send a smaller "
            "cost_weight.",
            param=param,
        )
    return utility


def _cost_weight(state, requested, default, *, param="cost_weight"):
    router = state.router
    weight = requested if requested is not None else default
    if weight is None:
        weight = float(router.cost_weight)
    if weight > 0 and router.model_costs_ is None:
        raise APIError(
            422,
            f"cost_weight={weight} needs model costs, but the served router has "
            "none; send cost_weight=0 or serve a router fitted with model_costs=.",
            param=param,
        )
    return float(weight)


class Service:
    """State shared by the endpoints: the router holder, the batcher, the client."""

    def __init__(
        self,
        holder,
        *,
        gateway,
        max_batch,
        batch_window,
        max_queries,
        max_query_chars,
        default_cost_weight,
    ):
        self.holder = holder
        self.gateway = gateway
        self.max_queries = max_queries
        self.max_query_chars = max_query_chars
        self.default_cost_weight = default_cost_weight
        self.batcher = MicroBatcher(
            self._predict, max_batch=max_batch, window=batch_window
        )
        self.client = None
        self.n_reloads = 0

    def _predict(self, state, queries):
        """One encoder + predictor call for a whole batch (worker thread), on
        the router snapshot its requests were submitted with."""
        return np.asarray(state.router.predict_proba(queries), np.float64)

    def check_queries(self, queries, *, param="queries", positions=None):
        """Refuse too many, empty or too long queries (422), naming each by
        its position in the request (``positions``, default 0, 1, ...; a
        position of None names the field itself, a single ``query``).

        Too many queries is a 422 however many: 413 is for a body over
        ``max_body_bytes`` only.
        """
        if positions is None:
            positions = range(len(queries))
        if len(queries) > self.max_queries:
            raise APIError(
                422,
                f"{param} has {len(queries)} queries; at most {self.max_queries} per "
                "request.",
                param=param,
            )
        for i, q in zip(positions, queries, strict=True):
            name, where = (
                (param, param) if i is None else (f"{param}[{i}]", f"{param}.{i}")
            )
            if not q.strip():
                raise APIError(
                    422,
                    f"{name} is empty or blank (got {q!r:.40}); send some text.",
                    param=where,
                )
            if len(q) > self.max_query_chars:
                raise APIError(
                    422,
                    f"{name} has {len(q)} characters; at most {self.max_query_chars}.",
                    param=where,
                )

    def check_running(self):
        """503 when the service is not started or is shutting down: for a
        request that needs no prediction (a gateway request pinned to a
        model), which :meth:`proba` would otherwise refuse."""
        try:
            self.batcher.check_running()
        except BatcherStopped as exc:
            raise APIError(503, str(exc), kind="server_error") from None

    async def proba(self, state, queries, *, param="queries"):
        """P(correct) of ``state``'s router, (n_queries, n_models).

        ``state`` is the snapshot the request was validated against: a
        reload while the request waits for its batch does not change the
        router that answers it (a model it named may be gone from the new
        one, or the costs its cost_weight needs).
        """
        try:
            return await self.batcher.submit(queries, context=state)
        except BatcherStopped as exc:
            # No lifespan run (an ASGI transport without it), or shut down.
            raise APIError(503, str(exc), kind="server_error") from None
        except (ValueError, TypeError, KeyError) as exc:
            # The encoder rejects what it cannot resolve (unknown ids, ...).
            raise APIError(422, f"{param}: {exc}", param=param) from None


def create_app(
    router,
    *,
    gateway=None,
    encoder=None,
    encoder_backend="torch",
    device=None,
    max_batch=64,
    batch_window_ms=0.0,
    max_queries=256,
    max_query_chars=100_000,
    max_body_bytes=1_000_000,
    watch_interval=None,
    admin_token_env=None,
):
    """The routing service (and, with ``gateway``, the OpenAI-compatible gateway).

    Parameters
    ----------
    router : str or path-like
        A router file written by :meth:`~locus_sklearn.LocusRouter.save`. It
        is the only file the service ever loads; ``POST /admin/reload`` (and
        the watcher) reload this path and nothing a client sends can name
        another.
    gateway : str, path-like, mapping or GatewayConfig, default=None
        Backends for ``/v1/chat/completions`` (see
        :func:`load_gateway_config`); None serves routing only. Each backend
        must name a model of the router's pool other than ``"locus"`` (the
        name that routes a request) and each ``api_key_env`` a variable that
        is set, and a ``cost_weight`` > 0 needs a router with costs; a
        router file that does not fit it is refused at start and on
        reload. Without a gateway ``cost_weight``, requests get the router's
        own, and a file whose own overflows with its costs is refused too.
    encoder : default=None
        Overrides the router's saved query encoder (see
        :meth:`~locus_sklearn.LocusRouter.load`). A mapping of precomputed
        encodings is added to those saved in the file, its vectors winning,
        at every load (as ``--encodings`` does for every ``locus`` command);
        it is needed to serve a file saved with ``include_query_text=False``.
    encoder_backend : {"torch", "onnx"}, default="torch"
        What runs the query encoder: PyTorch, or ONNX Runtime on the CPU
        (``QueryEncoder(backend="onnx")``: the same encodings to float
        rounding, about two thirds of the time per short text query on a
        CPU; exported when the router loads). Needs the ``onnx`` extra.
    device : str, default=None
        Torch device; None uses CUDA when available.
    max_batch : int, default=64
        Queries per micro-batch, at most (one larger request goes whole).
        This and the other ``max_*`` limits are ints >= 1.
    batch_window_ms : float, default=0.0
        How long a batch waits for more requests after its first one, at
        most 10000 (10 seconds: a longer wait would only hold requests). With
        0 a batch holds what arrived while the previous one computed, and a
        request that finds the service idle is answered at once.
    max_queries : int, default=256
        Queries per ``/route`` request, at most.
    max_query_chars : int, default=100000
        Characters per query, at most.
    max_body_bytes : int, default=1000000
        Request bodies above this size get 413 without being read.
    watch_interval : float, default=None
        Seconds (> 0) between checks of the router file's modification time;
        a changed file is reloaded. None: reload only on ``POST /admin/reload``.
    admin_token_env : str, default=None
        Name of an environment variable holding a token that
        ``POST /admin/reload`` then requires (``Authorization: Bearer ...``);
        read once, here: a variable that is not set (or is empty) is an
        error, and so is a token no request can carry (a control character,
        such as the CR of an env file with CRLF line endings, or a space or
        tab at either end).

    Returns
    -------
    app : fastapi.FastAPI
        Run it with uvicorn (``locus serve`` does). ``max_body_bytes`` is
        applied by a middleware of it.

    Examples
    --------
    >>> import tempfile, os
    >>> from fastapi.testclient import TestClient
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.serve import create_app
    >>> pool = make_model_pool(n_models=5, n_queries=60, evals_per_model=40,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=8,
    ...     n_latents=2, n_blocks=1, n_heads=2, max_epochs=1, enc_size=(16, 64),
    ...     random_state=0)
    ... ).fit(pool.evals)
    >>> path = os.path.join(tempfile.mkdtemp(), "router.safetensors")
    >>> router.save(path)
    >>> query = pool.evals["query"].iloc[0]
    >>> with TestClient(create_app(path)) as client:
    ...     answer = client.post("/route", json={"query": query}).json()
    >>> answer["results"][0]["model"] == router.predict([query])[0]
    True
    """
    _check_int("max_batch", max_batch)
    _check_int("max_queries", max_queries)
    _check_int("max_query_chars", max_query_chars)
    _check_int("max_body_bytes", max_body_bytes)
    _check_real("batch_window_ms", batch_window_ms, positive=False, upper=MAX_WINDOW_MS)
    if watch_interval is not None:
        _check_real("watch_interval", watch_interval, positive=True)
    if encoder_backend not in ("torch", "onnx"):
        raise ValueError(
            f"encoder_backend must be 'torch' or 'onnx'; got {encoder_backend!r}."
        )
    admin_token = None
    if admin_token_env is not None:
        admin_token = os.environ.get(admin_token_env)
        if not admin_token:
            # Else every reload would be refused as lacking the token.
            raise ValueError(
                f"admin_token_env={admin_token_env!r} names an environment "
                "variable that is not set (or is empty); set it to the token "
                "POST /admin/reload is to require."
            )
        _check_admin_token(admin_token, f"admin_token_env={admin_token_env!r}")
    fastapi_app = FastAPI(
        title="locus_sklearn router",
        description="Route queries to the language model most likely to answer them.",
        # What an endpoint returns as a dict (/models, /admin/reload) too.
        default_response_class=_JSONAnswer,
    )
    gateway = None if gateway is None else load_gateway_config(gateway)
    holder = RouterHolder(
        router,
        encoder=encoder,
        device=device,
        gateway=gateway,
        encoder_backend=encoder_backend,
    )
    service = Service(
        holder,
        gateway=gateway,
        max_batch=max_batch,
        batch_window=batch_window_ms / 1000,
        max_queries=max_queries,
        max_query_chars=max_query_chars,
        default_cost_weight=None if gateway is None else gateway.cost_weight,
    )
    fastapi_app.state.service = service
    # Every endpoint added below reads its JSON body strictly.
    fastapi_app.router.route_class = _JSONRoute

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.batcher.start()
        # No cap on connections to the backends (httpx's default is 100 over
        # all of them): each request in flight holds at most one, so a cap
        # would only turn the 101st concurrent request into backend timeouts.
        service.client = httpx.AsyncClient(
            timeout=None,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=None),
        )
        watcher = None
        if watch_interval is not None:
            watcher = asyncio.create_task(_watch(service, watch_interval))
        try:
            yield
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            await service.client.aclose()
            await service.batcher.stop()

    fastapi_app.router.lifespan_context = lifespan
    _install_error_handlers(fastapi_app)
    _add_route_endpoint(fastapi_app, service)
    _add_pool_endpoints(fastapi_app, service, admin_token)
    if gateway is not None:
        from ._gateway import add_gateway_endpoints

        add_gateway_endpoints(fastapi_app, service)
    # A middleware, not a wrapper: the app returned is the FastAPI app, with
    # its state, routes and add_middleware.
    fastapi_app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    fastapi_app.add_middleware(HeadAsGet)
    _openapi_as_answered(fastapi_app, service)
    return fastapi_app


def _check_admin_token(token, setting):
    """Refuse an admin token no request can carry, naming ``setting`` (the
    parameter or option, and the variable), never the token: one with a CR
    (an env file with CRLF line endings) or a space at either end was
    accepted, and then every reload got 401."""
    problem = _unsendable(token, as_bytes=True)
    if problem is not None:
        raise ValueError(
            f"{setting}: the token in this environment variable cannot be sent "
            f"in an HTTP header (value not shown): {problem}. A token must "
            "hold no control characters (CR, LF, ...) and neither begin nor "
            "end with a space or tab; set the variable again without them (a "
            "CR at the end comes from an env file with Windows CRLF line "
            "endings)."
        )


def _check_int(name, value):
    """``value`` must be an int >= 1: 0 or less would refuse every request or
    (for ``max_body_bytes``) silently lift the limit."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int >= 1; got {value!r} of type {type(value).__name__}."
        )
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}.")


def _check_real(name, value, *, positive, upper=None):
    """``value`` must be a finite number, > 0 or >= 0, and <= ``upper``."""
    bound = "> 0" if positive else ">= 0"
    if upper is not None:
        bound += f" and <= {upper}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a finite number {bound}; got {value!r} of type "
            f"{type(value).__name__}."
        )
    if (
        not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
        or (upper is not None and value > upper)
    ):
        raise ValueError(f"{name} must be a finite number {bound}; got {value!r}.")


async def _watch(service, interval):
    """Reload the router file when its modification time, size or identity
    changes (a symlink pointed at another file is followed)."""
    while True:
        await asyncio.sleep(interval)
        if service.holder.changed():
            # reload() logs the outcome; on a failure the old router serves.
            with contextlib.suppress(Exception):
                await service.holder.reload()
                service.n_reloads += 1


def _add_route_endpoint(app, service):
    @app.post(
        "/route",
        summary="Route queries to models",
        # No overload 503 here (a request waits for its batch): only the
        # gateway's, when no connection to a backend is free.
        responses={
            200: {"model": RouteAnswer},
            **_error_responses(
                400,
                413,
                415,
                422,
                503,
                descriptions={503: "The service is not started or is shutting down"},
            ),
        },
    )
    async def route_queries(body: RouteRequest):
        """Routed model, P(correct) of every model and the top k, per query."""
        if body.query is not None:
            queries, param = [body.query], "query"
            service.check_queries(queries, param=param, positions=[None])
        else:
            queries, param = body.queries, "queries"
            service.check_queries(queries, param=param)
        # One snapshot checks the request and answers it, so a bad subset is
        # a 422 before any work and a reload while the request waits for its
        # batch cannot turn a valid request into a 422.
        state = service.holder.current
        allowed = _allowed_mask(state, body.models)
        weight = _cost_weight(state, body.cost_weight, service.default_cost_weight)
        proba = await service.proba(state, queries, param=param)
        utility = _checked_utility(proba, state, weight, body.cost_weight is not None)
        routed = route(utility, np.broadcast_to(allowed, utility.shape))
        classes = state.classes
        k = min(body.top_k, int(allowed.sum()))
        masked = np.where(allowed, utility, -np.inf)
        results = []
        for i, j in enumerate(routed):
            top = np.argsort(-masked[i], kind="stable")[:k]
            result = {
                "model": str(classes[j]),
                "proba_routed": float(proba[i, j]),
                "top": [
                    {
                        "model": str(classes[t]),
                        "proba": float(proba[i, t]),
                        "utility": float(utility[i, t]),
                    }
                    for t in top
                ],
            }
            if body.return_proba:
                result["proba"] = dict(
                    zip(map(str, classes), proba[i].tolist(), strict=True)
                )
            results.append(result)
        # Plain JSON types already: a JSONResponse skips FastAPI's
        # jsonable_encoder walk over every value (about 0.3 ms a request).
        return _JSONAnswer(
            {
                "results": results,
                "cost_weight": weight,
                "router_version": state.version,
            }
        )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc, scheme):
    """``(host, port)`` of ``netloc`` (``host[:port]``, an IPv6 host in
    brackets), the port ``scheme``'s default where none is given; None if
    it is not one."""
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:  # a port that is not a number, an unclosed bracket
        return None
    if not parts.hostname or parts.username is not None or parts.path:
        return None
    return parts.hostname, _DEFAULT_PORTS.get(scheme) if port is None else port


def _cross_site(headers):
    """Why a request to ``/admin/reload`` comes from a web page of another
    site, as ``(header, reason)``, or None.

    A browser sends a form or ``fetch`` POST with a text/plain body without
    asking first (no CORS preflight), so without this any page open on the
    operator's machine could make a local service reload. Its ``Origin`` (a
    browser sets it on every POST) must name the host and port the request
    was sent to (``Host``). Clients that are not browsers (curl, httpx) send
    neither header.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() == "cross-site":
        return "Sec-Fetch-Site", "Sec-Fetch-Site is 'cross-site'"
    origin = headers.get("origin")
    if origin is None:
        return None
    host = headers.get("host")
    try:
        parts = urlsplit(origin)
    except ValueError:  # an unclosed bracket
        parts = None
    if parts is not None and parts.scheme in _DEFAULT_PORTS and host is not None:
        # A Host without a port: the default of the Origin's scheme (behind
        # a TLS proxy the service itself is reached over plain HTTP).
        sent = _host_port(parts.netloc, parts.scheme)
        if sent is not None and sent == _host_port(host, parts.scheme):
            return None
    shown = "none given" if host is None else repr(host)
    return "Origin", f"Origin {origin!r} is not this service's host ({shown})"


def _add_pool_endpoints(app, service, admin_token):
    @app.get(
        "/models",
        summary="The pool",
        responses={200: {"model": PoolAnswer}, **_error_responses(422)},
    )
    async def models(
        embeddings: bool = Query(False, description="Include embeddings."),
    ):
        state = service.holder.current
        router = state.router
        costs = router.model_costs_
        backends = service.gateway.backends if service.gateway else {}
        data = []
        for i, name in enumerate(state.classes):
            entry = {
                "name": str(name),
                "cost": None if costs is None else float(costs[i]),
                "backend": name in backends,
            }
            if embeddings:
                entry["embedding"] = router.model_embeddings_[i].tolist()
            data.append(entry)
        return {"models": data, **state.describe(service.default_cost_weight)}

    @app.get(
        "/healthz",
        summary="Liveness and the served router",
        responses={
            200: {"model": HealthBody},
            503: {
                "model": HealthBody,
                "description": "The service is not started or is shutting down: "
                "the same body, with status 'unavailable' and the reason",
            },
        },
    )
    async def healthz():
        state = service.holder.current
        batcher = service.batcher
        # As a request would find it: a batcher not running (lifespan not
        # run, or ended) answers every /route and gateway request with 503.
        try:
            batcher.check_running()
        except BatcherStopped as exc:
            status = {"status": "unavailable", "reason": str(exc)}
        else:
            status = {"status": "ok"}
        health = {
            **status,
            "router": {
                "path": str(service.holder.path),
                **state.describe(service.default_cost_weight),
            },
            "batching": {
                "batches": batcher.n_batches,
                "queries": batcher.n_items,
                "requests": batcher.n_calls,
                "max_batch": batcher.max_batch,
                "window_ms": batcher.window * 1000,
            },
            "reloads": service.n_reloads,
            "last_reload_error": service.holder.last_error,
        }
        return _JSONAnswer(health, status_code=200 if status["status"] == "ok" else 503)

    # Encoded once, as the client sends it; surrogateescape gives back the
    # bytes of a variable that is not UTF-8 (``.encode()`` raised, a 500).
    expected = (
        None
        if admin_token is None
        else f"Bearer {admin_token}".encode("utf-8", "surrogateescape")
    )

    @app.post(
        "/admin/reload",
        summary="Reload the configured router file",
        responses={200: {"model": ReloadAnswer}, **_error_responses(401, 403, 409)},
    )
    async def reload(request: Request):
        """Load the configured file again and swap it in between requests.

        Takes no parameters: only the file the service was started with is
        ever loaded. A file that does not load or validate leaves the old
        router serving and answers 409 with the reason. A request a web
        page sent (an ``Origin`` of another host or port, or
        ``Sec-Fetch-Site: cross-site``) is refused with 403.
        """
        refused = _cross_site(request.headers)
        if refused is not None:
            header, reason = refused
            raise APIError(
                403,
                f"Reload refused: {reason}. A web page of another site may not "
                "reload the service; send the request from a client that sets "
                "no Origin header (curl, httpx, Python).",
                param=header,
                kind="permission_error",
            )
        if expected is not None:
            # Compared as bytes: compare_digest refuses a str with non-ASCII
            # characters, and a header holds any byte (Starlette decodes it
            # as Latin-1, which gives the bytes back).
            given = request.headers.get("authorization", "").encode("latin-1")
            if not hmac.compare_digest(given, expected):
                raise APIError(
                    401,
                    "Reloading needs the admin token.",
                    kind="auth_error",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        try:
            old, new = await service.holder.reload()
        except Exception as exc:
            return error_response(
                409,
                f"Reload failed; still serving version {service.holder.current.version}:"
                f" {type(exc).__name__}: {exc}",
                kind="reload_failed",
            )
        service.n_reloads += 1
        before, after = set(old.classes), set(new.classes)
        return {
            "status": "reloaded",
            "previous_version": old.version,
            **new.describe(service.default_cost_weight),
            "added": sorted(after - before),
            "removed": sorted(before - after),
        }
