"""What the engine does with runs, built on the machinery: run operations, approvals,
definitions, notifications and `http` steps."""
