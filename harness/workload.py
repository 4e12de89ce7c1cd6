"""The workload contract and registry.

A workload is a command run in the guest with its working directory on the filesystem under test.
Built-in and third-party workloads register a ``Workload`` under the entry-point group
``powercut.workloads``; the harness finds them by name there and never imports them by module name.
``python -m powercut.workload NAME`` runs one (the guest side of a recording does exactly that)."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from powercut import registry
from powercut.errors import UsageError

GROUP = "powercut.workloads"


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    main: Callable[[dict[str, Any]], int]
    defaults: dict[str, Any] = field(default_factory=dict)

    def params(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """Defaults overlaid with ``given``; unknown keys and wrong types are a UsageError."""
        given = dict(given or {})
        unknown = set(given) - set(self.defaults)
        if unknown:
            raise UsageError(f"workload {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(self.defaults)) or 'none'}")
        out = dict(self.defaults)
        for key, value in given.items():
            want = type(self.defaults[key])
            try:
                out[key] = (value if isinstance(value, want) else
                            (str(value).lower() in ("1", "true", "yes", "on")) if want is bool else want(value))
            except (TypeError, ValueError):
                raise UsageError(f"workload {self.name}: parameter {key} wants a {want.__name__}, "
                                 f"not {value!r}") from None
        return out


def names() -> list[str]:
    return registry.names(GROUP)


def get(name: str) -> Workload:
    return registry.load(GROUP, name, Workload, "unknown workload {name!r}; known: {known} "
                                                "(or give any command with --cmd)")


def parse_params(items: list[str]) -> dict[str, str]:
    """``key=value`` strings (from ``--param``) to a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param wants key=value, not {item!r}")
        out[key.strip()] = value
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m powercut.workload NAME   (params as JSON in $POWERCUT_PARAMS)\n")
        return 2
    workload = get(args[0])
    params = workload.params(json.loads(os.environ.get("POWERCUT_PARAMS") or "{}"))
    return int(workload.main(params) or 0)


if __name__ == "__main__":
    # Run through the package's own module object, so isinstance checks see one Workload class.
    from powercut.workload import main as _main
    sys.exit(_main())
