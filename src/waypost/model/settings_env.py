"""Secrets the environment configures, given inline or in a file."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from waypost.errors import ConfigurationError


def secret_setting(env: Mapping[str, str], name: str) -> str:
    """The text of `name`, or of the file `name_FILE` names ("" when neither is set;
    both set is an error, as a setting must have one source)."""
    text = env.get(name)
    path = env.get(f"{name}_FILE")
    if text and path:
        raise ConfigurationError(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise ConfigurationError(f"cannot read {name}_FILE: {exc}") from None
    return text or ""


def key_list(spec: str, written: str) -> Iterator[tuple[str, str]]:
    """The `id:secret` parts of a comma-separated list of keys, in order, as (id, secret);
    a part without its colon is refused with `written` (how a key is written)."""
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key_id, sep, encoded = part.partition(":")
        if not sep:
            raise ConfigurationError(f"{written}, not {part[:8]!r}...")
        yield key_id, encoded
