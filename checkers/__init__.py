"""Checkers, one per workload (package powercut.checkers)."""
