"""Prometheus exposition text, parsed for tests to read."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One exposition, parsed: a sample's value by name and labels."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.names: set[str] = set()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value
                self.names.add(s.name)

    def __call__(self, name: str, **labels: str) -> float:
        """The sample's value (0 if the series is not there, as Prometheus reads absence)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def queued(self, tenant: str, kind: str, name: str = "waypost_queue_depth") -> float:
        """The sum over the tenant's queues of one kind of task."""
        return sum(
            v
            for (n, labels), v in self.samples.items()
            if n == name and ("tenant", tenant) in labels and ("kind", kind) in labels
        )

    def labelled(self, name: str) -> list[dict[str, str]]:
        return [dict(labels) for (n, labels) in self.samples if n == name]
