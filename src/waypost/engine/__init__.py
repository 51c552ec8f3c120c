"""The engine: replay runtime, workers, scheduler and the API."""
