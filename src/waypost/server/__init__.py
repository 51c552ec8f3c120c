"""`waypost server`: the HTTP API, the approval page and health checks over the one door."""
