"""The architecture holds: layers and cycles (import-linter), private names, file sizes,
and the sync `Engine` derived from `AsyncEngine` with the same surface."""

from __future__ import annotations

import ast
import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import waypost as wp
from waypost.client.door import Door
from waypost.client.engine import AsyncEngine, AsyncRunHandle
from waypost.client.remote import AsyncClient, Client
from waypost.client.sync import Engine, RunHandle
from waypost.model import operations as ops

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "waypost"
MAX_LINES = 800

# Private names of the standard library that waypost relies on on purpose.
STDLIB_PRIVATE = {
    "_getframe",  # sys: the workflow code's file and line, for messages
    "_get_running_loop",  # asyncio.events: the workflow loop runs inside another loop
    "_set_running_loop",
    "_replace",  # namedtuple's public API
    "_asdict",
    "_fields",
    "_exit",  # os: a second Ctrl-C ends the process at once, with no clean-up
}


def _names_defined(tree: ast.AST) -> set[str]:
    """Every name a module defines itself: functions, classes, attributes it assigns."""
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            defined.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return defined


def private_reaches(path: Path) -> list[str]:
    """Where a module uses a private name (`x._y`, `from m import _y`) it does not define."""
    tree = ast.parse(path.read_text(), str(path))
    defined = _names_defined(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if (
                name.startswith("_")
                and not name.startswith("__")
                and name not in defined
                and name not in STDLIB_PRIVATE
            ):
                found.append(f"{path.relative_to(SOURCE)}:{node.lineno}: .{name}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__"):
                    found.append(f"{path.relative_to(SOURCE)}:{node.lineno}: import {name}")
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = [hit for path in sorted(SOURCE.rglob("*.py")) for hit in private_reaches(path)]
    assert found == []


def test_the_private_name_check_finds_a_reach(tmp_path: Path) -> None:
    module = SOURCE / "_probe_for_test.py"  # inside the tree, as the check reports paths there
    module.write_text(
        "from waypost.engine.runner import _secret\n"
        "def f(engine):\n"
        "    return engine._commit(1)\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def g(self, other):\n"
        "        return other._mine\n"
    )
    try:
        hits = private_reaches(module)
    finally:
        module.unlink()
    assert hits == [
        "_probe_for_test.py:1: import _secret",
        "_probe_for_test.py:3: ._commit",
    ]


def test_no_source_file_is_longer_than_the_limit() -> None:
    long = {
        str(p.relative_to(SOURCE)): n
        for p in SOURCE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_loop_waits_with_asyncio_wait_for() -> None:
    # On Python 3.11 wait_for can swallow a cancellation that arrives as what it waits
    # for completes: a background loop then never ends and the engine's stop hangs (seen
    # once in 2,475 tests). asyncio.timeout does not.
    users = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "src" / "waypost").rglob("*.py"))
        if "asyncio.wait_for(" in path.read_text()
    ]
    assert users == []


def test_the_import_contracts_hold() -> None:
    """Layers point downward only and no package's modules import each other in a circle
    (the contracts are in pyproject.toml)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is not installed (pip install -e '.[test]')"
    done = subprocess.run(
        [lint, "--no-logo", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


# == the sync Engine is derived ==========================================================
LIFECYCLE = {"open", "close", "abandon", "start_serving", "stop_serving", "run_forever"}


def _public_coroutines(cls: type) -> dict[str, object]:
    """The class's own public coroutine methods and those of its mixins (not object's)."""
    found: dict[str, object] = {}
    for base in reversed(cls.__mro__[:-1]):
        for name, fn in vars(base).items():
            if not name.startswith("_") and inspect.iscoroutinefunction(fn):
                found[name] = fn
    return found


@pytest.mark.parametrize(
    ("async_cls", "sync_cls", "skip"),
    [
        (AsyncEngine, Engine, LIFECYCLE),
        (AsyncRunHandle, RunHandle, set()),
        (AsyncClient, Client, {"close"}),
    ],
)
def test_every_async_operation_has_a_blocking_twin_with_its_signature_and_doc(
    async_cls: type, sync_cls: type, skip: set[str]
) -> None:
    expected = {n: f for n, f in _public_coroutines(async_cls).items() if n not in skip}
    assert expected, "nothing to compare"
    derived = {  # its own and its mixins' (a domain's blocking calls beside its async ones)
        name: fn
        for klass in reversed(sync_cls.__mro__)
        for name, fn in vars(klass).items()
        if inspect.iscoroutinefunction(getattr(fn, "__wrapped__", None))
    }
    assert sorted(derived) == sorted(expected)
    for name, fn in derived.items():
        original = expected[name]
        assert fn.__wrapped__ is original, name  # type: ignore[attr-defined]
        assert inspect.signature(fn) == inspect.signature(original), name
        assert fn.__doc__ == original.__doc__, name


def test_the_remote_client_calls_are_the_engines_without_tenant() -> None:
    """Code moves between `wp.Engine` and `wp.Client` unchanged: each call the client
    has takes the engine's parameters (but `tenant`, which the API key decides)."""
    shared = sorted(set(_public_coroutines(AsyncClient)) - {"close"})
    assert {"terminate", "fork", "purge_runs", "verify", "update_input"} <= set(shared)
    for name in shared:
        engine = inspect.signature(_public_coroutines(AsyncEngine)[name])  # type: ignore[arg-type]
        without = engine.replace(
            parameters=[p for p in engine.parameters.values() if p.name != "tenant"]
        )
        client = inspect.signature(_public_coroutines(AsyncClient)[name])  # type: ignore[arg-type]
        if name == "execute":  # the API key is the principal
            assert list(client.parameters) == ["self", "request"], name
            continue
        if name in ("start", "signal_with_start", "result"):  # their own remote forms
            assert list(client.parameters)[:2] == list(without.parameters)[:2], name
            continue
        assert client == without, name


def test_the_sync_methods_block_and_return_what_the_async_ones_answer(tmp_path: Path) -> None:
    @wp.workflow(name="twice")
    async def twice(ctx: wp.WorkflowContext, n: int) -> int:
        return 2 * n

    with Engine(f"sqlite:///{tmp_path / 'sync.db'}") as engine:
        engine.register(twice)
        with engine.running():
            handle = engine.start(twice, 21)
            assert isinstance(handle, RunHandle)
            assert handle.result(timeout=10) == 42
            assert engine.get(handle.run_id).status is wp.RunStatus.COMPLETED
            assert [e.type for e in handle.history()][-1] == "RunCompleted"


def test_every_operation_has_a_handler(tmp_path: Path) -> None:
    engine = AsyncEngine(f"sqlite:///{tmp_path / 'never-opened.db'}")
    door = engine._door  # the test looks at the wiring itself
    assert isinstance(door, Door)
    missing = [op.__name__ for op in ops.OPERATIONS if not door.serves(op)]
    assert missing == []
    bases = (ops.Request, ops.RunRequest, ops.RunCommand, ops.PlatformCommand, ops.TenantCommand)
    declared = {
        obj
        for obj in vars(ops).values()
        if isinstance(obj, type) and issubclass(obj, ops.Request) and obj not in bases
    }
    assert declared == set(ops.OPERATIONS)
