"""The machinery that moves runs: the decision loop, the worker and the scheduler."""
