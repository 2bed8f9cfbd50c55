"""The gateway's configuration: one backend per pool model, and the fallback policy.

A small YAML or JSON file::

    backends:
      gpt-4-1106-preview:              # a model of the router's pool
        base_url: https://api.openai.com/v1
        model: gpt-4-1106-preview      # the backend's name for it (default: the key)
        api_key_env: OPENAI_API_KEY    # environment variable holding the key
                                       # (must be set when the server starts)
        timeout: 30                    # seconds per attempt
      mixtral-8x7b-chat:
        base_url: http://127.0.0.1:8000/v1
    fallback:
      max_attempts: 3                  # models tried per request, at most
      deadline: 60                     # seconds per request, all attempts
      metric: cosine                   # distance of the fallback order
    cost_weight: 0.0005                # default λ (else the router's own)

Keys are never written in the file, only the name of the variable that holds
one, so the file can be committed. Values are checked strictly: a number
written as a string (``timeout: "30"``) or a boolean where a number goes
(``max_attempts: true``) is an error naming the field, never converted;
numbers must be finite; a key written twice in one mapping is an error (one
merged in with ``<<: *anchor`` may be written again, overriding it, as YAML
says), and so is a key YAML reads as something other than text (``yes:`` is
a boolean).
``base_url`` may carry a query (``?api-version=...``), kept after the path
``/chat/completions`` is added to; a fragment (``#...``) is refused.
"""

import difflib
import json
import os
import re
import stat
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

from .._paths import file_mode, not_regular_file
from ._deps import require

require("pydantic")

from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationError,
    field_validator,
)

__all__ = [
    "BackendConfig",
    "FallbackConfig",
    "GatewayConfig",
    "load_gateway_config",
    "format_validation_error",
]


class BackendConfig(BaseModel):
    """Where and how to call one model of the pool (an OpenAI-compatible API)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    base_url: HttpUrl
    model: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout: float = Field(default=60.0, gt=0, le=3600, allow_inf_nan=False)

    @field_validator("base_url")
    @classmethod
    def _no_fragment(cls, url):
        # A fragment is never sent to a server: the path added after it
        # would be lost with it.
        if url.fragment is not None:
            raise ValueError(
                f"a fragment ('#{url.fragment}') is never sent to the backend; "
                "remove it"
            )
        return url

    @field_validator("model")
    @classmethod
    def _not_blank(cls, model):
        if model is not None and not model.strip():
            raise ValueError("blank; give the backend's name for the model")
        return model

    @property
    def chat_url(self):
        """``base_url`` with ``/chat/completions`` added to its path; a query
        (Azure's ``?api-version=...``) stays after it.

        >>> from locus_sklearn.serve import load_gateway_config
        >>> config = load_gateway_config({"backends": {"m": {
        ...     "base_url": "https://h.test/openai/x?api-version=2024-02-01"}}})
        >>> config.backends["m"].chat_url
        'https://h.test/openai/x/chat/completions?api-version=2024-02-01'
        """
        parts = urlsplit(str(self.base_url))
        path = parts.path.rstrip("/") + "/chat/completions"
        return urlunsplit(parts._replace(path=path))

    def api_key(self):
        """The key from its environment variable, or None (no Authorization)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class FallbackConfig(BaseModel):
    """How far the gateway goes down the fallback order when backends fail."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_attempts: int = Field(default=3, ge=1, le=100)
    deadline: float = Field(default=60.0, gt=0, le=3600, allow_inf_nan=False)
    metric: str = Field(default="cosine", pattern="^(cosine|euclidean)$")


class GatewayConfig(BaseModel):
    """The gateway's backends and fallback policy.

    Examples
    --------
    >>> from locus_sklearn.serve import load_gateway_config
    >>> config = load_gateway_config(
    ...     {"backends": {"m1": {"base_url": "http://127.0.0.1:9001/v1"}}})
    >>> config.backends["m1"].chat_url
    'http://127.0.0.1:9001/v1/chat/completions'
    >>> config.fallback.max_attempts
    3
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    backends: dict[str, BackendConfig] = Field(min_length=1)
    fallback: FallbackConfig = FallbackConfig()
    # Finite: an infinite default weight would fail every request.
    cost_weight: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("backends")
    @classmethod
    def _names(cls, backends):
        for name in backends:
            if not name:
                raise ValueError("a backend has an empty model name")
        return backends

    def backend_model(self, name):
        """The name the backend knows pool model ``name`` by."""
        return self.backends[name].model or name


def format_validation_error(exc, *, prefix="", yaml=False):
    """One line per problem, each naming the field: ``backends.m1.timeout: ...``.

    With ``yaml``, a number PyYAML read as a string (``1e3``) gets a hint.
    An unknown key of a configuration section gets the section's valid keys
    (and the nearest one), not its value: a misplaced ``api_key: sk-...``
    would print the secret; it gets a pointer to ``api_key_env`` instead.

    >>> from locus_sklearn.serve import load_gateway_config
    >>> load_gateway_config({"backends": {"m": {
    ...     "base_url": "http://127.0.0.1:9001/v1", "timout": 30}}})
    Traceback (most recent call last):
    ...
    ValueError: Invalid gateway configuration: backends.m.timout: unknown key (did you mean 'timeout'? valid keys: base_url, model, api_key_env, timeout)
    """
    root = _CONFIG_MODELS.get(exc.title)
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        if error.get("type") == "extra_forbidden":
            lines.append(prefix + _unknown_key(where, root, error["loc"]))
            continue
        line = f"{prefix}{where}: {error['msg']}"
        value = error.get("input")
        if _may_be_a_key(error):
            lines.append(
                f"{line} (its value not shown: it may be the key itself; "
                "api_key_env names the environment variable that holds the key, "
                "e.g. api_key_env: OPENAI_API_KEY)"
            )
            continue
        # The bad value too, unless it is the enclosing mapping (a missing
        # field) or a whole section.
        if error.get("type") != "missing" and not isinstance(value, (dict, list)):
            line += f" (got {value!r:.80})"
            if yaml:
                line += _yaml_number_hint(value)
        lines.append(line)
    return "; ".join(lines)


_CONFIG_MODELS = {
    model.__name__: model for model in (GatewayConfig, BackendConfig, FallbackConfig)
}

# The name of an unknown key that probably holds a secret (``api_key``,
# ``token``): its value is never printed, and the message points to
# api_key_env.
_SECRET_NAME = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|key|token|secret|password|authorization)(?:$|[_-])",
    re.IGNORECASE,
)


# How an environment variable is referred to elsewhere ($VAR, ${VAR},
# LiteLLM's os.environ/VAR): an api_key_env written so is shown, as it names
# a variable, not a key.
_ENV_REFERENCE = re.compile(r"(?:\$\{?|os\.environ/)[A-Za-z_][A-Za-z0-9_]*\}?")


def _may_be_a_key(error):
    """Whether a refused ``api_key_env`` may hold the key itself (written
    there in place of the variable's name): its value is then not printed."""
    value = error.get("input")
    return (
        error.get("type") == "string_pattern_mismatch"
        and error["loc"][-1:] == ("api_key_env",)
        and isinstance(value, str)
        and not _ENV_REFERENCE.fullmatch(value.strip())
    )


def _section(model, loc):
    """The configuration model whose key is the last part of ``loc``
    (``("backends", "m", "timout")`` in a GatewayConfig: BackendConfig), or
    None where ``loc`` leads elsewhere."""
    current = model
    for part in loc[:-1]:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif get_origin(current) is dict:  # the key of a mapping (a model name)
            current = get_args(current)[1]
        else:
            return None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _unknown_key(where, root, loc):
    """The error line of an unknown key ``loc[-1]`` at ``where``: the valid
    keys of its section and the nearest one, never its value (a key written
    as ``api_key: sk-...`` would print the secret to the terminal and CI
    logs)."""
    name = str(loc[-1])
    section = _section(root, loc) if root is not None else None
    if _SECRET_NAME.search(name):
        field = "api_key_env" if section is BackendConfig else "a backend's api_key_env"
        return (
            f"{where}: unknown key, its value not shown (a key is never written "
            "in the file: put it in an environment variable and name the "
            f"variable with {field}, e.g. api_key_env: OPENAI_API_KEY)"
        )
    if section is None:
        return f"{where}: unknown key"
    valid = list(section.model_fields)
    # One or two letters wrong or swapped score 0.8 or more (timout 0.92,
    # modle 0.8); difflib's default cutoff, 0.6, offered metric for retries.
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"{where}: unknown key ({hint}valid keys: {', '.join(valid)})"


# A float as YAML 1.1 (PyYAML) resolves it: a dot is required, and an
# exponent's sign.
_YAML11_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?")


def _yaml_number_hint(value):
    """For a number PyYAML read as a string (``1e3``: YAML 1.1 wants a dot
    and a signed exponent), how to write it; else ''."""
    if not isinstance(value, str) or _YAML11_FLOAT.fullmatch(value):
        return ""
    match = re.fullmatch(r"([-+]?[0-9]+(?:\.[0-9]*)?)[eE]([-+]?[0-9]+)", value)
    if match is None:
        return ""
    mantissa, exponent = match.groups()
    if "." not in mantissa:
        mantissa += ".0"
    if exponent[0] not in "+-":
        exponent = "+" + exponent
    number = float(value)
    plain = f" or {int(number)}" if number.is_integer() and abs(number) < 1e15 else ""
    return (
        f"; YAML 1.1 reads {value} as a string, not a number: write it as "
        f"{mantissa}e{exponent}{plain}"
    )


def _unique_keys(pairs):
    """A JSON object as a dict, refusing a repeated key: a parser keeps the
    last one silently, so a backend written twice would lose the first."""
    config = {}
    for key, value in pairs:
        if key in config:
            raise ValueError(f"the key {key!r} appears twice in one object")
        config[key] = value
    return config


class _KeyNotText(ValueError):
    """A YAML mapping key read as something other than text."""


def _unique_key_loader(yaml):
    """A safe YAML loader that refuses a repeated key in a mapping (safe_load
    keeps the last one silently), naming the key and its line, and a key
    that is not text (every key of the configuration is a name), naming it
    as written: ``yes:`` is read as True, which pydantic reports as ``1``."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            # Merge keys (``<<: *shared``) are flattened first, as safe_load
            # does: a merged key is overridden by one written here, which is
            # YAML's rule, not a repeat; only the keys written here must be
            # unique.
            written = {id(key_node) for key_node, _ in node.value}
            self.flatten_mapping(node)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str) and isinstance(key_node, yaml.ScalarNode):
                    raise _KeyNotText(
                        f"the key {key_node.value} (line "
                        f"{key_node.start_mark.line + 1}) is read by YAML as "
                        f"{key!r}, not as a name; write it in quotes: "
                        f"'{key_node.value}':"
                    )
                if id(key_node) not in written or not isinstance(key, Hashable):
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"found the key {key!r} a second time",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _as_dicts(value):
    """``value`` with every mapping in it a dict (a MappingProxyType or
    UserDict too, nested ones included): pydantic's strict mode takes only
    dicts."""
    if isinstance(value, Mapping):
        return {key: _as_dicts(item) for key, item in value.items()}
    return value


def _unreadable(exc, shown):
    """``exc`` (an OSError) as one of its type naming the configuration file
    ``shown`` and the reason, with its errno."""
    error = type(exc)(
        f"Cannot read the gateway configuration file {shown!r}: {exc.strerror or exc}."
    )
    error.errno = exc.errno  # kept for callers that map errors to exit codes
    return error


def _check_config_file(path, shown):
    """Refuse a ``path`` that is not an existing regular file (as
    :func:`locus_sklearn._files.check_regular_file` does, in the words of a
    configuration file), before it is opened: opening a named pipe blocks,
    and ``is_file()`` said "No such file" of a folder, a symlink loop or a
    file in a folder without search permission."""
    try:
        mode = file_mode(path)
    except OSError as exc:  # a symlink loop, a folder without permission
        raise _unreadable(exc, shown) from None
    if mode is None:
        raise FileNotFoundError(f"No such gateway configuration file: {shown!r}.")
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            f"The gateway configuration {shown!r} is a folder; give the path "
            "of a YAML or JSON file."
        )
    if not stat.S_ISREG(mode):
        raise not_regular_file(
            mode, f"The gateway configuration {shown!r}", "a YAML or JSON file"
        )


def load_gateway_config(config):
    """Read and validate a gateway configuration.

    Parameters
    ----------
    config : str, path-like, mapping or GatewayConfig
        A YAML (``.yaml``/``.yml``) or JSON file (a leading ``~`` is
        expanded), or its content as a mapping (any
        :class:`collections.abc.Mapping`, nested ones included).

    Returns
    -------
    config : GatewayConfig

    Raises
    ------
    ValueError
        Naming every bad field (``backends.m1.base_url: ...``) and the file.
    FileNotFoundError
        If nothing exists at the path.
    IsADirectoryError
        If the path is a folder.
    OSError
        If the path is a named pipe, a device or a socket (errno ``EINVAL``),
        or cannot be read (a symbolic link loop, no permission), naming the
        file and the reason.

    Examples
    --------
    >>> from locus_sklearn.serve import load_gateway_config
    >>> load_gateway_config({"backends": {"m1": {"base_url": "ftp://x"}}})
    Traceback (most recent call last):
    ...
    ValueError: Invalid gateway configuration: backends.m1.base_url: URL scheme should be 'http' or 'https' (got 'ftp://x')
    """
    if isinstance(config, GatewayConfig):
        return config
    source = "gateway configuration"
    is_yaml = False
    if isinstance(config, (str, os.PathLike)):
        # Messages name the path as given; ``~`` is expanded to read it.
        shown = os.fspath(config)
        path = Path(os.path.expanduser(shown))
        source = f"gateway configuration {shown!r}"
        _check_config_file(path, shown)
        try:
            # utf-8-sig: a byte order mark (Windows editors write one) is
            # not part of the text; json.loads refuses it.
            text = path.read_text(encoding="utf-8-sig")
        except OSError as exc:  # no read permission, an I/O error
            raise _unreadable(exc, shown) from None
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"The {source} is not UTF-8 text ({exc.reason} at byte "
                f"{exc.start}); write it as a UTF-8 YAML or JSON file."
            ) from None
        if path.suffix.lower() in (".yaml", ".yml"):
            is_yaml = True
            yaml = require("yaml")
            try:
                config = yaml.load(text, Loader=_unique_key_loader(yaml))
            except yaml.YAMLError as exc:
                raise ValueError(f"{source} is not valid YAML: {exc}") from None
            except _KeyNotText as exc:
                raise ValueError(f"Invalid {source}: {exc}") from None
        else:
            try:
                config = json.loads(text, object_pairs_hook=_unique_keys)
            except ValueError as exc:  # JSONDecodeError, or a repeated key
                raise ValueError(
                    f"{source} is not valid JSON ({exc}); use a .yaml or .yml "
                    "suffix for YAML."
                ) from None
    if isinstance(config, Mapping):
        config = _as_dicts(config)
    if not isinstance(config, dict):
        raise ValueError(
            f"The {source} must be a mapping with a 'backends' key; got "
            f"{type(config).__name__}."
        )
    try:
        return GatewayConfig.model_validate(config)
    except ValidationError as exc:
        raise ValueError(
            f"Invalid {source}: {format_validation_error(exc, yaml=is_yaml)}"
        ) from None
