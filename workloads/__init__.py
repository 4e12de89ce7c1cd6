"""Built-in workloads (package powercut.workloads), registered as entry points."""
