"""Turning workflow values into stored JSON and back.

Inputs, results, signal payloads and errors all pass through one `Codec`.
The default `JsonCodec` converts dataclasses, pydantic models, enums,
datetimes, UUIDs, decimals and bytes (as base64 text) to JSON on the way in, and
rebuilds them from the type hints of the receiving function on the way out. A codec that changes
payloads (compresses them, say) wraps this one: `encode` returns any JSON value
and `decode` reverses it. Encryption at rest is not a codec's job: the store
encrypts its payload columns, bound to their run and event
(`waypost.model.encryption`, decision 0009).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import enum
import json
import math
import types
import typing
import uuid
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from waypost.errors import PayloadError


@runtime_checkable
class Codec(Protocol):
    def encode(self, value: Any) -> Any:
        """A JSON-compatible value for `value`; raises `PayloadError` naming the bad part."""
        ...

    def decode(self, data: Any, hint: Any = Any) -> Any:
        """The value of type `hint` that `data` (from `encode`) stands for."""
        ...


_PRIMITIVES = (str, int, bool, type(None))


class JsonCodec:
    """The default codec: plain JSON, with common Python types converted."""

    def encode(self, value: Any) -> Any:
        if isinstance(value, dict | list):
            plain = _plain_copy(value)
            if plain is not None:
                return plain
        try:
            return _to_json(value, "value")
        except RecursionError:
            raise PayloadError("value is nested too deeply to be stored as JSON") from None

    def decode(self, data: Any, hint: Any = Any) -> Any:
        try:
            return _from_json(data, hint, "value")
        except RecursionError:
            raise PayloadError("value is nested too deeply to be read back") from None


def _plain_copy(value: dict[Any, Any] | list[Any]) -> Any:
    """A copy of `value` if it is JSON as it is (string keys, lists, finite numbers), made
    by the C encoder and decoder; None if not (then `_to_json` converts it, or says what is
    wrong). A megabyte of input is copied in milliseconds rather than walked in Python."""
    try:
        copy = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None
    # Equal only if nothing was converted on the way: a tuple, a key that was not a string.
    return copy if copy == value else None


def _to_json(value: Any, path: str) -> Any:
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{path} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, enum.Enum):
                k = k.value
            if not isinstance(k, str):
                raise PayloadError(
                    f"{path} has a key {k!r} of type {type(k).__name__}; "
                    "JSON object keys must be strings"
                )
            out[k] = _to_json(v, f"{path}[{k!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_to_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _to_json(getattr(value, f.name), f"{path}.{f.name}")
            for f in dataclasses.fields(value)
        }
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return _to_json(dump(mode="json"), path)
    if isinstance(value, enum.Enum):
        return _to_json(value.value, path)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    raise PayloadError(
        f"{path} is of type {type(value).__module__}.{type(value).__qualname__}, "
        "which cannot be stored as JSON (use dicts, lists, str, int, float, bool, None, "
        "bytes, dataclasses or pydantic models)"
    )


def _from_json(data: Any, hint: Any, path: str) -> Any:
    if hint is Any or hint is None or hint is object or hint is typing.Any:
        return data
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _from_json(data, typing.get_args(hint)[0], path)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _from_json(data, arg, path)
            except (PayloadError, TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise PayloadError(f"{path} matches none of {hint}: {'; '.join(errors)}")
    if origin in (list, typing.Sequence, tuple, set, frozenset) or hint in (list, tuple):
        if not isinstance(data, list):
            raise PayloadError(f"{path} should be a list, got {type(data).__name__}")
        args = typing.get_args(hint)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise PayloadError(f"{path} should have {len(args)} items, got {len(data)}")
            return tuple(
                _from_json(v, a, f"{path}[{i}]")
                for i, (v, a) in enumerate(zip(data, args, strict=True))
            )
        item = args[0] if args else Any
        items = [_from_json(v, item, f"{path}[{i}]") for i, v in enumerate(data)]
        if origin is tuple or hint is tuple:
            return tuple(items)
        if origin in (set, frozenset):
            return origin(items)
        return items
    if origin in (dict, typing.Mapping) or hint is dict:
        if not isinstance(data, dict):
            raise PayloadError(f"{path} should be an object, got {type(data).__name__}")
        args = typing.get_args(hint)
        key_hint, val = (args[0], args[1]) if len(args) == 2 else (Any, Any)
        if isinstance(key_hint, type) and issubclass(key_hint, enum.Enum):
            # Enum keys were stored as their values; bring the members back.
            return {
                _from_json(k, key_hint, f"{path} key {k!r}"): _from_json(v, val, f"{path}[{k!r}]")
                for k, v in data.items()
            }
        return {k: _from_json(v, val, f"{path}[{k!r}]") for k, v in data.items()}
    if origin is typing.Literal:
        if data not in typing.get_args(hint):
            raise PayloadError(f"{path} is {data!r}, expected one of {typing.get_args(hint)}")
        return data
    if not isinstance(hint, type):
        return data
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise PayloadError(
                f"{path} should be an object for {hint.__name__}, got {type(data).__name__}"
            )
        try:
            hints = typing.get_type_hints(hint)
        except Exception:
            hints = {}
        kwargs = {}
        for f in dataclasses.fields(hint):
            if f.name in data:
                kwargs[f.name] = _from_json(
                    data[f.name], hints.get(f.name, Any), f"{path}.{f.name}"
                )
        try:
            return hint(**kwargs)
        except TypeError as exc:
            raise PayloadError(f"{path} cannot be read as {hint.__name__}: {exc}") from exc
    validate = getattr(hint, "model_validate", None)
    if callable(validate):
        try:
            return validate(data)
        except Exception as exc:
            raise PayloadError(f"{path} cannot be read as {hint.__name__}: {exc}") from exc
    if issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError as exc:
            raise PayloadError(f"{path}: {exc}") from exc
    parse = _PARSERS.get(hint)
    if parse is not None:
        if not isinstance(data, str) and not (hint is Decimal and isinstance(data, int | float)):
            raise PayloadError(f"{path} should be str, got {type(data).__name__}")
        try:
            return parse(str(data))
        except (ValueError, ArithmeticError) as exc:
            raise PayloadError(f"{path} is {data!r}, not a valid {hint.__name__}: {exc}") from exc
    if hint in (bytes, bytearray):
        if not isinstance(data, str):
            raise PayloadError(f"{path} should be base64 text, got {type(data).__name__}")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PayloadError(f"{path} is not valid base64: {exc}") from exc
        return raw if hint is bytes else bytearray(raw)
    if hint is float:
        if not isinstance(data, int | float) or isinstance(data, bool):
            raise PayloadError(f"{path} should be float, got {type(data).__name__}")
        return float(data)
    if hint in (str, int, bool) and not isinstance(data, hint):
        raise PayloadError(f"{path} should be {hint.__name__}, got {type(data).__name__}")
    if hint is int and isinstance(data, bool):
        raise PayloadError(f"{path} should be int, got bool")
    return data


_PARSERS: dict[Any, Any] = {
    dt.datetime: dt.datetime.fromisoformat,
    dt.date: dt.date.fromisoformat,
    dt.time: dt.time.fromisoformat,
    uuid.UUID: uuid.UUID,
    Decimal: Decimal,
}


MAX_CAUSES = 8
"""The most causes (`raise ... from`, or an error raised while handling another) kept."""


def error_to_json(
    exc: BaseException, *, traceback_text: str | None = None, causes: bool = False
) -> dict[str, Any]:
    """How an exception is stored: its type, message and (optionally) traceback; with
    `causes`, the chain of errors that led to it, each as `{type, module, message,
    details?}` under the one before's `cause` (at most `MAX_CAUSES`)."""
    out = _error_of(exc)
    if traceback_text:
        out["traceback"] = traceback_text
    if causes:
        at, seen = out, {id(exc)}
        cause = _cause_of(exc)
        for _ in range(MAX_CAUSES):
            if cause is None or id(cause) in seen:
                break
            seen.add(id(cause))
            at["cause"] = at = _error_of(cause)
            cause = _cause_of(cause)
    return out


def _cause_of(exc: BaseException) -> BaseException | None:
    """What `exc` was raised from, or while handling (unless `from None` hid it)."""
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def _error_of(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": getattr(exc, "error_type", None) or type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc),
    }
    details = getattr(exc, "error_details", None)
    if details:
        out["details"] = details
    return out
