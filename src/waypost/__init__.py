"""waypost: a durable workflow engine for Python.

Write a workflow as an `async def`, its side effects as activities, and the
engine runs it to completion through crashes, retries, duplicate deliveries
and long waits, with the whole history in one database.
"""

from waypost.engine.approvals import (
    ApprovalInfo,
    DecisionReceipt,
    DecisionRefused,
    Directory,
    InvalidCredential,
)
from waypost.engine.context import ActivityContext, WorkflowContext
from waypost.engine.core import AsyncEngine
from waypost.engine.interpreter import DefinitionFailed
from waypost.engine.records import (
    AsyncRunHandle,
    DefinitionInfo,
    MigrationReport,
    RunHandle,
    RunInfo,
)
from waypost.engine.registry import activity, workflow
from waypost.engine.senders import (
    FileSender,
    LogSender,
    Notification,
    Sender,
    SmtpSender,
    WebhookSender,
    senders_from_url,
    verify_webhook,
)
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
from waypost.model.approvals import AllOf, AnyOf, Decision, Policy, Quorum
from waypost.model.codec import Codec, JsonCodec
from waypost.model.definitions import DefinitionError, InputError, Limits
from waypost.model.events import Event, EventType
from waypost.model.retry import Retry
from waypost.model.status import RunStatus

__version__ = "0.1.0"

__all__ = [
    "ActivityCancelled",
    "ActivityContext",
    "ActivityError",
    "AllOf",
    "AnyOf",
    "ApprovalInfo",
    "AsyncEngine",
    "AsyncRunHandle",
    "Codec",
    "ConfigurationError",
    "Decision",
    "DecisionReceipt",
    "DecisionRefused",
    "DefinitionError",
    "DefinitionFailed",
    "DefinitionInfo",
    "Directory",
    "Engine",
    "Event",
    "EventType",
    "FileSender",
    "InputError",
    "InvalidCredential",
    "JsonCodec",
    "Limits",
    "LogSender",
    "MigrationReport",
    "NonRetryableError",
    "NondeterminismError",
    "Notification",
    "PayloadError",
    "Policy",
    "Quorum",
    "ResultTimeout",
    "Retry",
    "RunEndedError",
    "RunHandle",
    "RunIdConflict",
    "RunInfo",
    "RunNotActive",
    "RunNotFound",
    "RunStatus",
    "Sender",
    "SmtpSender",
    "StoreCorrupted",
    "StoreError",
    "UnknownActivity",
    "UnknownWorkflow",
    "WaitTimeout",
    "WaypostError",
    "WebhookSender",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowTerminated",
    "__version__",
    "activity",
    "senders_from_url",
    "verify_webhook",
    "workflow",
]
