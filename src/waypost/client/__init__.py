"""The public client: `AsyncEngine`, the derived `Engine`, and the one door."""
