"""waypost: a durable workflow engine for Python.

Write a workflow as an `async def`, its side effects as activities, and the
engine runs it to completion through crashes, retries, duplicate deliveries
and long waits, with the whole history in one database.
"""

from waypost.client.engine import AsyncEngine, AsyncRunHandle
from waypost.client.sync import Engine, RunHandle
from waypost.errors import (
    ActivityCancelled,
    ActivityError,
    ApprovalNotFound,
    BrokenHistory,
    BrokenRecord,
    ChildFailed,
    ConfigurationError,
    DecisionRefused,
    DefinitionNotFound,
    EncryptionKeyMissing,
    Failure,
    InvalidCredential,
    InvalidRequest,
    InvalidState,
    KeyNotFound,
    NondeterminismError,
    NonRetryableError,
    NoRunWaiting,
    PayloadError,
    PayloadTampered,
    PermissionDenied,
    PlaintextRefused,
    QueryFailed,
    QueueNotFound,
    QuotaExceeded,
    ResultTimeout,
    RunEndedError,
    RunIdConflict,
    RunNotActive,
    RunNotFound,
    StoreContention,
    StoreCorrupted,
    StoreError,
    StoreRejected,
    TenantExists,
    TenantNotFound,
    Unauthenticated,
    UnknownActivity,
    UnknownWorkflow,
    UpdateFailed,
    UpdateRejected,
    UpdateTimeout,
    UserExists,
    UserNotFound,
    WaitTimeout,
    WaypostError,
    WebhookRefused,
    WebhookSourceExists,
    WebhookSourceNotFound,
    WorkflowBug,
    WorkflowCancelled,
    WorkflowError,
    WorkflowFailed,
    WorkflowTerminated,
)
from waypost.features.approvals import Directory
from waypost.features.senders import (
    FileSender,
    LogSender,
    Notification,
    Sender,
    SmtpSender,
    WebhookSender,
    senders_from_url,
    verify_webhook,
)
from waypost.model.approvals import AllOf, AnyOf, Decision, Policy, Quorum
from waypost.model.chain import Chain, ChainKey
from waypost.model.codec import Codec, JsonCodec
from waypost.model.definitions import DefinitionError, InputError, Limits
from waypost.model.encryption import Keys
from waypost.model.events import Event, EventType
from waypost.model.fork import Forked
from waypost.model.identity import Principal, Role
from waypost.model.quotas import Quotas
from waypost.model.records import (
    ApprovalInfo,
    CredentialView,
    DecisionReceipt,
    DefinitionInfo,
    KeyInfo,
    MigrationReport,
    NewKey,
    RunInfo,
    RunPage,
    Started,
    TenantInfo,
)
from waypost.model.retry import Retry
from waypost.model.status import RunStatus
from waypost.runtime.context import ActivityContext, WorkflowContext
from waypost.runtime.interpreter import DefinitionFailed
from waypost.runtime.registry import activity, workflow

__version__ = "0.1.0"

__all__ = [
    "ActivityCancelled",
    "ActivityContext",
    "ActivityError",
    "AllOf",
    "AnyOf",
    "ApprovalInfo",
    "ApprovalNotFound",
    "AsyncClient",
    "AsyncEngine",
    "AsyncRunHandle",
    "BrokenHistory",
    "BrokenRecord",
    "Chain",
    "ChainKey",
    "ChildFailed",
    "Client",
    "Codec",
    "ConfigurationError",
    "CredentialView",
    "Decision",
    "DecisionReceipt",
    "DecisionRefused",
    "DefinitionError",
    "DefinitionFailed",
    "DefinitionInfo",
    "DefinitionNotFound",
    "Directory",
    "EncryptionKeyMissing",
    "Engine",
    "Event",
    "EventType",
    "Failure",
    "FileSender",
    "Forked",
    "InputError",
    "InvalidCredential",
    "InvalidRequest",
    "InvalidState",
    "JsonCodec",
    "KeyInfo",
    "KeyNotFound",
    "Keys",
    "Limits",
    "LogSender",
    "MigrationReport",
    "NewKey",
    "NoRunWaiting",
    "NonRetryableError",
    "NondeterminismError",
    "Notification",
    "PayloadError",
    "PayloadTampered",
    "PermissionDenied",
    "PlaintextRefused",
    "Policy",
    "Principal",
    "QueryFailed",
    "QueueNotFound",
    "Quorum",
    "QuotaExceeded",
    "Quotas",
    "ResultTimeout",
    "Retry",
    "Role",
    "RunEndedError",
    "RunHandle",
    "RunIdConflict",
    "RunInfo",
    "RunNotActive",
    "RunNotFound",
    "RunPage",
    "RunStatus",
    "Sender",
    "SmtpSender",
    "Started",
    "StoreContention",
    "StoreCorrupted",
    "StoreError",
    "StoreRejected",
    "TenantExists",
    "TenantInfo",
    "TenantNotFound",
    "Unauthenticated",
    "UnknownActivity",
    "UnknownWorkflow",
    "UpdateFailed",
    "UpdateRejected",
    "UpdateTimeout",
    "UserExists",
    "UserNotFound",
    "WaitTimeout",
    "WaypostError",
    "WebhookRefused",
    "WebhookSender",
    "WebhookSourceExists",
    "WebhookSourceNotFound",
    "WorkflowBug",
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


def __getattr__(name: str) -> object:
    # The HTTP client needs httpx (the `client` extra): imported when first asked for.
    if name in ("Client", "AsyncClient"):
        from waypost.client import remote

        return getattr(remote, name)
    raise AttributeError(f"module 'waypost' has no attribute {name!r}")
