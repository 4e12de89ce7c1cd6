"""Checker commands the VM tests share."""

from __future__ import annotations


def panic_or_hang(panic_id: str, hang_id: str) -> str:
    """A command checker that panics the checker VM's kernel on ``panic_id``, hangs on ``hang_id``
    and passes every other state."""
    return (
        "python3 -c 'import json, sys, time\n"
        's = json.load(sys.stdin)["state"]\n'
        f'if s == "{panic_id}": open("/proc/sysrq-trigger", "w").write("c")\n'
        f'if s == "{hang_id}": time.sleep(1000)\n'
        'print("fine")\''
    )
