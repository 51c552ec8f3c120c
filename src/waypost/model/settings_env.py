"""Secrets the environment configures, given inline or in a file."""

from __future__ import annotations

from collections.abc import Mapping

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
