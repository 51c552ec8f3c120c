"""`waypost server`: the HTTP API, the approval page and health checks over the one door."""

from . import paths  # noqa: F401  (registers the `id` path convertor the routes use)
