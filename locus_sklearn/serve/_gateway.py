"""OpenAI-compatible gateway: route each chat request, forward it, fall back.

``POST /v1/chat/completions`` routes a request by its last user message among
the pool models that have a backend, forwards it there (with the backend's
own model name and key) and returns the backend's answer, streamed or not,
with the model that answered in the ``x-locus-model`` header (percent-encoded
where it is not visible ASCII, see :func:`_header_value`; and, for JSON
answers, in a ``locus`` field, as it is). A request whose ``model`` names a served
model is not routed: it goes to that model and falls back like a routed one.
An invalid request is a 400, as OpenAI answers it (``/route`` answers a bad
field with 422). When a backend fails (connection refused,
timeout, 500, 502, 503, 504, 429, 408) the request goes to the next model of the routed
model's capability-based fallback order (nearest model embeddings first),
each model at most once, within ``fallback.max_attempts`` attempts and
``fallback.deadline`` seconds. So do a 200 that is not a JSON object (or, for
a stream, that ends before its first byte) and any other answer below 400
(a 204, a redirect): none of them could be relayed as an answer. A 200 to a
streamed request that is not ``text/event-stream`` is read whole and judged
as a non-streamed answer: a JSON object (a backend that does not stream) is
relayed as JSON, anything else (an HTML error page, truncated JSON) is a
failed attempt. Other 4xx
answers are the client's problem and are relayed with their status and the
``locus`` field, as an error object (see :func:`_error_body`). A stream that
has begun is not retried. Once the client has disconnected, no further
model is tried. A failed attempt is reported to the client by the kind of
failure only (``ConnectError: connection failed``), never by the
exception's text, which may hold a header value (the backend's key); the
text is logged, keys redacted.

A backend's ``timeout`` bounds each attempt as a whole, from sending the
request to the end of a non-streamed answer (a backend that sends its
headers at once and then its body slowly is abandoned at the timeout too),
or to the first chunk of a streamed one; the deadline bounds every attempt
likewise. A stream that has begun is relayed to its end, past the deadline,
each later chunk within ``timeout`` of the one before (a stalled stream is
cut, not ended as if complete).

A JSON answer holding a lone surrogate escape (``"\\ud800"``, which cannot
be encoded as UTF-8) is relayed as the backend wrote it: written with ASCII
escapes, the same JSON value.
"""

import asyncio
import json
import time
import traceback
from typing import Annotated, Literal
from urllib.parse import quote

import numpy as np

from ._deps import require

require("httpx")

import httpx  # noqa: E402
from fastapi import Request  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import StreamingResponse  # noqa: E402
from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WrapValidator,
)
from pydantic_core import PydanticCustomError  # noqa: E402

from ..metrics import route  # noqa: E402
from ._app import (  # noqa: E402
    APIError,
    ErrorBody,
    _allowed_mask,
    _checked_utility,
    _cost_weight,
    _error_responses,
    _JSONAnswer,
    _JSONRoute,
    _strict_json,
    _validation_error,
    error_response,
    logger,
)

__all__ = ["add_gateway_endpoints", "RETRYABLE_STATUS"]

#: Backend answers that send the request to the next model (and so does any
#: answer below 400 other than 200).
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def _failed_status(status):
    """A backend status that is a failed attempt: a retryable error, or an
    answer below 400 other than 200 (a 204 has no answer, a redirect is not
    followed and its Location not relayed)."""
    return status in RETRYABLE_STATUS or (status < 400 and status != 200)


ROUTER_MODEL = "locus"

# Left as they are in a header value: visible ASCII but "%", the escape. A
# space is escaped too, as HTTP strips it at either end of a value.
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def _header_value(name):
    """A model name as an HTTP header value: percent-encoded as UTF-8 (RFC
    3986, as RFC 8187 writes non-ASCII header parameters) where it holds a
    character outside visible ASCII, or a "%"; ``urllib.parse.unquote``
    gives the name back. Starlette writes header values as Latin-1, so an en
    dash or CJK text could not be sent as it is (the backend had already
    answered), and a CR or LF would end the header."""
    return quote(name, safe=_HEADER_SAFE)


class _OpenAIRoute(_JSONRoute):
    """The chat route: an invalid request is a 400 (``invalid_request_error``,
    naming the field), as OpenAI's API answers it and its clients expect
    (the openai SDK raises ``BadRequestError``), where ``/route`` answers a
    bad field with 422. The body is read strictly, as on ``/route``."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def openai_handler(request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                _, message, param = _validation_error(exc)
                raise APIError(400, message, param=param) from None
            except APIError as exc:
                if exc.status != 422:
                    raise
                raise APIError(
                    400,
                    exc.message,
                    param=exc.param,
                    kind=exc.kind,
                    headers=exc.headers,
                ) from None

        return openai_handler


def _one_of(expected):
    """A validator for a union field that refuses a value of none of its
    types with one error at the field itself, ``Input should be
    {expected}``: pydantic's own gives one error per member, each located
    under the member's type (``content.str``, ``content.list[...].0``),
    which is not a field of the request."""

    def validate(value, handler):
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(
                "union_type", "Input should be {expected}", {"expected": expected}
            ) from None

    return WrapValidator(validate)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1)
    content: Annotated[
        str | list[dict] | None,
        _one_of("a string, null or a list of content-part objects"),
    ] = None


class ChatRequest(BaseModel):
    """An OpenAI chat request; unknown fields are forwarded as they are.

    Strict, like ``/route``: ``"stream": "yes"`` is a 400, not a stream.
    ``"stream": null`` is no stream, as OpenAI reads it (its SDK may send
    it), and is forwarded as it is.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = None
    # locus extensions (removed before forwarding), e.g. the OpenAI client's
    # extra_body={"cost_weight": 0.001}
    cost_weight: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    models: list[str] | None = Field(
        default=None, min_length=1, json_schema_extra={"uniqueItems": True}
    )


class LocusField(BaseModel):
    """Which model answered a relayed answer (its ``locus`` field)."""

    model: str = Field(description="The model that answered.")
    routed_model: str = Field(description="The routed (or pinned) model.")
    failed: list[dict] = Field(
        description="The attempts that failed before it: model and error."
    )


class ChatAnswer(BaseModel):
    """A backend's chat completion, relayed with the ``locus`` field."""

    model_config = ConfigDict(extra="allow")

    locus: LocusField


class RelayedErrorBody(ErrorBody):
    """A backend's 4xx answer, relayed with its status and the ``locus`` field."""

    locus: LocusField


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str = Field(description="locus_sklearn for 'locus', else backend.")


class ModelList(BaseModel):
    """``locus`` and the served models, in OpenAI's list format."""

    object: Literal["list"]
    data: list[ModelCard]


# Keys of the gateway's own in an error object (ErrorDetail's), which a
# relayed backend error must not set with other meanings or types.
_GATEWAY_ERROR_KEYS = ("routed_model", "attempts", "backend_body")


def _error_body(data, content):
    """A backend's error answer (``data``, its JSON value or None, of the
    bytes ``content``) as an error object: ``{"error": {"message", "type",
    "param"}}``, which OpenAI clients read the message from.

    An answer that is no JSON object has its text, cut at 2,000 characters,
    as the message.

    An ``error`` object with a string ``message`` is kept, its ``type`` set
    to ``"backend_error"`` where it is not a string (Azure's content filter
    sends null) and ``param`` to None where it is neither a string nor None,
    and the gateway's own keys (``routed_model``, ``attempts``,
    ``backend_body``) that it holds moved under ``backend_body`` (the
    original object, unchanged), so that the answer keeps the declared error
    shape; any other object is wrapped, its
    message the backend's own (a string ``error``, ``message`` or ``detail``:
    Ollama's ``{"error": "..."}``, vLLM's ``{"object": "error", "message":
    ...}``, a FastAPI backend's) or else its JSON text, and the body kept
    whole under ``error.backend_body``.
    """
    if not isinstance(data, dict):
        message = content.decode(errors="replace")[:2000]
        return {"error": {"message": message, "type": "backend_error", "param": None}}
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kept = {k: v for k, v in error.items() if k not in _GATEWAY_ERROR_KEYS}
        if not isinstance(kept.get("type"), str):
            kept["type"] = "backend_error"
        if not isinstance(kept.get("param", 0), str | None):
            kept["param"] = None
        if any(k not in kept or kept[k] is not v for k, v in error.items()):
            # Something the backend sent was replaced or moved: kept whole.
            kept["backend_body"] = {**data, "error": error}
        return {**data, "error": kept}
    message = next(
        (
            data[key]
            for key in ("error", "message", "detail")
            if isinstance(data.get(key), str)
        ),
        None,
    )
    if message is None:
        message = json.dumps(data, ensure_ascii=False)[:2000]
    return {
        "error": {
            "message": message,
            "type": "backend_error",
            "param": None,
            "backend_body": data,
        }
    }


def _last_user_text(messages):
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role != "user":
            continue
        content = message.content
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "\n".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            )
        else:
            text = ""
        if text.strip():
            return text, i
        raise APIError(
            400,
            f"messages[{i}] (the last user message) has no text to route by.",
            param=f"messages.{i}.content",
        )
    raise APIError(400, "messages has no user message to route by.", param="messages")


def _attempt_order(state, routed, allowed, max_attempts):
    """The routed model, then its fallback order among allowed models."""
    allowed_names = set(state.classes[allowed])
    order = [routed] + [m for m in state.fallback[routed] if m in allowed_names]
    return order[:max_attempts]


def add_gateway_endpoints(app, service):
    """Add ``/v1/chat/completions`` and ``/v1/models`` to the service's app."""
    config = service.gateway

    @app.get(
        "/v1/models",
        summary="OpenAI-compatible model list",
        responses={200: {"model": ModelList}},
    )
    async def list_models():
        state = service.holder.current
        pool = set(state.classes)
        created = int(time.time())
        data = [
            {
                "id": ROUTER_MODEL,
                "object": "model",
                "created": created,
                "owned_by": "locus_sklearn",
            }
        ]
        data += [
            {"id": name, "object": "model", "created": created, "owned_by": "backend"}
            for name in config.backends
            if name in pool
        ]
        return {"object": "list", "data": data}

    async def chat(body: ChatRequest, request: Request):
        # Forward what the client sent, less the locus extensions. The body
        # was parsed strictly (the route class), so a NaN or 1e400 (say a
        # temperature) or a repeated key was a 400 before any routing, not a
        # failure to forward it after.
        payload = dict(await request.json())
        payload.pop("cost_weight", None)
        payload.pop("models", None)
        state = service.holder.current
        served = [m for m in config.backends if m in set(state.classes)]
        if body.model == ROUTER_MODEL:
            routed, fallback_pool = await _route(service, state, served, body)
        elif body.model in served:
            if body.models is not None:
                raise APIError(400, "models is only for model='locus'.", param="models")
            # Pinned: not routed, so the messages need no text to route by,
            # nothing is encoded or predicted, and cost_weight (a routing
            # parameter) has nothing to weigh. The model falls back to its
            # neighbours among every served model.
            service.check_running()
            routed = body.model
            fallback_pool = np.isin(state.classes, served)
        else:
            raise APIError(
                404,
                f"model={body.model!r} is neither {ROUTER_MODEL!r} (route the request) "
                f"nor a served model: {served[:20]}.",
                param="model",
                kind="model_not_found",
            )
        order = _attempt_order(
            state, routed, fallback_pool, config.fallback.max_attempts
        )
        return await _forward(
            service, request, payload, order, routed, stream=bool(body.stream)
        )

    # Added with its own route class: invalid requests are OpenAI's 400s.
    app.router.add_api_route(
        "/v1/chat/completions",
        chat,
        methods=["POST"],
        summary="OpenAI-compatible chat, routed",
        responses={
            200: {
                "model": ChatAnswer,
                "description": "The backend's answer: JSON, or with stream=true "
                "the backend's server-sent events, relayed as they come",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **_error_responses(
                400,
                404,
                413,
                415,
                502,
                503,
                504,
                descriptions={
                    400: "The body is not standard UTF-8 JSON, or a field is invalid"
                },
            ),
            "4XX": {
                "model": RelayedErrorBody,
                "description": "A backend's own 4xx (any but 408 and 429, which "
                "fall back), relayed with its status and the locus field; a "
                "status declared on its own may be a backend's too",
            },
        },
        route_class_override=_OpenAIRoute,
    )


async def _route(service, state, served, body):
    """Route a ``model="locus"`` request by its last user message on the
    router snapshot ``state`` (whose models with a backend are ``served``):
    the routed model and the mask of the models it may fall back to (the
    requested ones, each with a backend, or every served one)."""
    config = service.gateway
    if body.models is not None:
        _allowed_mask(state, body.models)
        no_backend = [m for m in body.models if m not in config.backends]
        if no_backend:
            raise APIError(
                400,
                f"models has model(s) without a backend: {no_backend[:5]}.",
                param="models",
            )
    text, index = _last_user_text(body.messages)
    service.check_queries([text], param="messages", positions=[index])
    weight = _cost_weight(state, body.cost_weight, service.default_cost_weight)
    # Never empty: the requested models were checked above to be in the pool
    # with a backend, and the gateway configuration is checked at every load
    # to give the pool's models a backend. One snapshot checks the request
    # and answers it, so no reload comes between.
    allowed = _allowed_mask(state, body.models if body.models is not None else served)
    # Answered by the snapshot it was checked against, whatever reload comes
    # while it waits for its batch.
    proba = await service.proba(state, [text], param="messages")
    utility = _checked_utility(proba, state, weight, body.cost_weight is not None)
    routed = str(state.classes[route(utility, allowed[None, :])[0]])
    return routed, allowed


def _is_event_stream(response):
    content_type = response.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower() == "text/event-stream"


async def _attempt(client, request, stream):
    """Send ``request``; the response and its content: the whole body, or
    for a streamed 200 of server-sent events the first chunk and an iterator
    of the rest (None for a failed status, or a stream that ended before its
    first byte). A streamed 200 of another content type (an HTML error page,
    JSON) is read whole, to be judged as a non-streamed answer. Awaited
    under the attempt's time bound, so a slow body is bounded like a slow
    connection."""
    response = await client.send(request, stream=True)
    try:
        if _failed_status(response.status_code):
            return response, None
        if stream and response.status_code == 200 and _is_event_stream(response):
            chunks = response.aiter_bytes()
            first = b""
            while not first:
                first = await anext(chunks, None)
                if first is None:
                    return response, None
            return response, (first, chunks)
        return response, await response.aread()
    except BaseException:
        # Timed out (cancelled) or failed part-way: free the connection.
        await response.aclose()
        raise


# What a failed attempt tells the client, by the exception's type (the first
# that matches): never the exception's text, as h11's holds the header value
# it refused, the backend's key included.
_ATTEMPT_ERRORS = (
    (httpx.ConnectError, "connection failed"),
    (httpx.NetworkError, "connection lost"),
    (httpx.RemoteProtocolError, "invalid response from backend"),
    (httpx.DecodingError, "undecodable response from backend"),
    (httpx.HTTPError, "invalid request to backend"),
)


def _attempt_error(exc):
    """A failed attempt's error as the client sees it: the exception's type
    and a fixed description (``ConnectError: connection failed``)."""
    # Not an httpx error: the request could not be built (a key httpx
    # cannot encode).
    description = next(
        (text for kind, text in _ATTEMPT_ERRORS if isinstance(exc, kind)),
        "invalid request to backend",
    )
    return f"{type(exc).__name__}: {description}"


def _redact(text, config):
    """``text`` with every configured key replaced by ``[redacted]``: as it
    is, stripped, and as ``repr`` writes it in a str or bytes (h11 writes
    the refused header value as ``b'Bearer sk-...\\r'``)."""
    forms = set()
    for backend in config.backends.values():
        key = backend.api_key()
        if not key:
            continue
        forms |= {
            key,
            key.strip(),
            repr(key)[1:-1],
            repr(key.encode("utf-8", "backslashreplace"))[2:-1],
        }
    for form in sorted(forms - {""}, key=len, reverse=True):
        text = text.replace(form, "[redacted]")
    return text


def _log_failed_attempt(config, model, exc):
    """The whole failure of an attempt, for the operator: the client gets
    only :func:`_attempt_error`. Unexpected failures (not httpx's) come with
    their traceback; keys are redacted from all of it."""
    if isinstance(exc, httpx.HTTPError):
        detail = f"{type(exc).__name__}: {exc}"
    else:
        detail = "".join(traceback.format_exception(exc)).rstrip()
    logger.warning("Gateway attempt at %s failed: %s", model, _redact(detail, config))


async def _forward(service, client_request, payload, order, routed, *, stream):
    config = service.gateway
    client = service.client
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.fallback.deadline
    attempts = []
    for model in order:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if await client_request.is_disconnected():
            # The client has gone (it gave up while an earlier attempt ran):
            # no answer can reach it, so no further backend is called (each
            # call may be paid for). The answer is never sent.
            logger.info(
                "Gateway client disconnected after %d attempt(s); %s and the "
                "models after it not tried",
                len(attempts),
                model,
            )
            return error_response(
                499,
                "The client disconnected before any backend answered.",
                kind="client_closed_request",
                attempts=attempts,
                routed_model=routed,
            )
        backend = config.backends[model]
        # The attempt, up to its first chunk, within both bounds.
        timeout = min(backend.timeout, remaining)
        headers = {"content-type": "application/json"}
        key = backend.api_key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        body = {**payload, "model": config.backend_model(model)}
        try:
            # Built in here: a key httpx cannot encode (the variable changed
            # after start-up) fails this attempt, not the whole request.
            request = client.build_request(
                "POST",
                backend.chat_url,
                json=body,
                headers=headers,
                # Each read: the reads of a stream that has begun, past the
                # deadline, are bounded by the backend's own timeout only.
                timeout=httpx.Timeout(backend.timeout),
            )
            # httpx's timeout bounds each read alone; this bounds the attempt
            # whole (to the first chunk of a stream): a backend that stalls
            # before its headers, or sends them and then its body slowly, is
            # left at its timeout or the deadline, whichever comes first.
            response, content = await asyncio.wait_for(
                _attempt(client, request, stream), timeout=timeout
            )
        except httpx.PoolTimeout:
            # No free connection: the gateway's own overload, not a failure
            # of this backend, so no fallback attempt is spent on it.
            return error_response(
                503,
                "The gateway is overloaded: no connection to a backend was free "
                f"within {timeout:g} seconds; retry later.",
                kind="server_error",
                routed_model=routed,
            )
        except (httpx.TimeoutException, asyncio.TimeoutError):
            attempts.append({"model": model, "error": "timeout"})
            continue
        except Exception as exc:
            # A connection refused or cut, a body that does not decode, a
            # header h11 refuses: a failed attempt, whatever it is, told to
            # the client by its kind only.
            attempts.append({"model": model, "error": _attempt_error(exc)})
            _log_failed_attempt(config, model, exc)
            continue
        if content is None:
            await response.aclose()
            error = (
                f"HTTP {response.status_code}"
                if _failed_status(response.status_code)
                else "empty stream"
            )
            attempts.append({"model": model, "error": error})
            continue
        locus_headers = {
            "x-locus-model": _header_value(model),
            "x-locus-routed-model": _header_value(routed),
            "x-locus-attempts": str(len(attempts) + 1),
        }
        if isinstance(content, tuple):
            return StreamingResponse(
                _relay(response, *content),
                status_code=200,
                media_type=response.headers.get("content-type", "text/event-stream"),
                headers=locus_headers,
            )
        try:
            # Strictly: a NaN or 1e400 in the answer (say a usage cost), or
            # nesting too deep to encode again, could not be passed on as
            # JSON; such an answer is a failed attempt.
            data = _strict_json(content)
        except ValueError:
            data = None
        if response.status_code == 200 and not isinstance(data, dict):
            attempts.append({"model": model, "error": "invalid JSON answer"})
            continue
        if response.status_code >= 400 or not isinstance(data, dict):
            # As every error answer is: a client reads error.message.
            data = _error_body(data, content)
        data["locus"] = {"model": model, "routed_model": routed, "failed": attempts}
        return _JSONAnswer(
            data, status_code=response.status_code, headers=locus_headers
        )
    timed_out = deadline - loop.time() <= 0
    return error_response(
        504 if timed_out else 502,
        f"No backend answered: tried {len(attempts)} model(s) in fallback order"
        + (" before the deadline" if timed_out else "")
        + ": "
        + "; ".join(f"{a['model']} ({a['error']})" for a in attempts),
        kind="backend_error",
        attempts=attempts,
        routed_model=routed,
    )


async def _relay(response, first, chunks):
    """Pass the backend's stream through chunk by chunk, decoded: a backend
    that compressed it (``content-encoding: gzip``) is decompressed here, as
    the relayed answer carries no content-encoding of its own. ``first`` is
    the chunk the attempt waited for, ``chunks`` the rest of
    ``response.aiter_bytes()``."""
    try:
        if first:
            yield first
        async for chunk in chunks:
            yield chunk
    finally:
        await response.aclose()
