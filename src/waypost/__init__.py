"""waypost: a durable workflow engine for Python.

Write a workflow as an `async def`, its side effects as activities, and the
engine runs it to completion through crashes, retries, duplicate deliveries
and long waits, with the whole history in one database.
"""

from waypost.engine.context import ActivityContext, WorkflowContext
from waypost.engine.core import AsyncEngine
from waypost.engine.records import AsyncRunHandle, RunHandle, RunInfo
from waypost.engine.registry import activity, workflow
from waypost.engine.sync import Engine
from waypost.errors import (
    ActivityCancelled,
    ActivityError,
    ConfigurationError,
    NondeterminismError,
    NonRetryableError,
    PayloadError,
    ResultTimeout,
    RunEndedError,
    RunIdConflict,
    RunNotActive,
    RunNotFound,
    StoreCorrupted,
    StoreError,
    UnknownActivity,
    UnknownWorkflow,
    WaitTimeout,
    WaypostError,
    WorkflowCancelled,
    WorkflowError,
    WorkflowFailed,
    WorkflowTerminated,
)
from waypost.model.codec import Codec, JsonCodec
from waypost.model.events import Event, EventType
from waypost.model.retry import Retry
from waypost.model.status import RunStatus

__version__ = "0.1.0"

__all__ = [
    "ActivityCancelled",
    "ActivityContext",
    "ActivityError",
    "AsyncEngine",
    "AsyncRunHandle",
    "Codec",
    "ConfigurationError",
    "Engine",
    "Event",
    "EventType",
    "JsonCodec",
    "NonRetryableError",
    "NondeterminismError",
    "PayloadError",
    "ResultTimeout",
    "Retry",
    "RunEndedError",
    "RunHandle",
    "RunIdConflict",
    "RunInfo",
    "RunNotActive",
    "RunNotFound",
    "RunStatus",
    "StoreCorrupted",
    "StoreError",
    "UnknownActivity",
    "UnknownWorkflow",
    "WaitTimeout",
    "WaypostError",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowTerminated",
    "__version__",
    "activity",
    "workflow",
]
