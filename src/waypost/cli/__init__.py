"""The `waypost` command: a thin interface that builds requests and prints answers."""

from .main import main

__all__ = ["main"]
