"""The deterministic workflow runtime: history and time in, commands out; no I/O."""
