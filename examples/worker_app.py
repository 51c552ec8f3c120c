"""Workflows for a separate worker process.

Serve them with the command line (from the repository root):
    PYTHONPATH=examples .venv/bin/waypost worker --db sqlite:///worker-example.db --app worker_app
and start runs from any other process with an engine on the same database:
    PYTHONPATH=examples .venv/bin/python -c "import waypost as wp, worker_app; \
e = wp.Engine('sqlite:///worker-example.db'); e.register(worker_app.greet, worker_app.hello); \
print(e.result(e.start('greet', 'Ada').run_id, timeout=30))"
"""

from __future__ import annotations

import waypost as wp


@wp.activity
def hello(ctx: wp.ActivityContext, name: str) -> str:
    return f"hello, {name} (attempt {ctx.attempt})"


@wp.workflow(name="greet")
async def greet(ctx: wp.WorkflowContext, name: str) -> str:
    return await ctx.run(hello, name)
