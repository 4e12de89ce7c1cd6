"""The workload contract and registry.

A workload is a command run in the guest with its working directory on the filesystem under test.
Built-in and third-party workloads register a ``Workload`` under the entry-point group
``powercut.workloads``; the harness finds them by name there and never imports them by module name.
``python -m powercut.workload NAME`` runs one (the guest side of a recording does exactly that).

Parameters are typed by their defaults and checked before anything runs: a boolean is one of
true/false, yes/no, on/off, 1/0 (``fsync=maybe`` is an error, never False: a mistyped flag must
not record a program without its fsync and report its lost acks as findings); a number has a
minimum (``minimum``, else 0); ``choices`` lists the values a parameter may take."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from powercut import registry
from powercut.errors import UsageError
from powercut.linux import environ

GROUP = "powercut.workloads"
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise ValueError(f"wants true or false (yes/no, on/off, 1/0), not {value!r}")


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    main: Callable[[dict[str, Any]], int]
    defaults: dict[str, Any] = field(default_factory=dict)
    choices: dict[str, tuple[Any, ...]] = field(
        default_factory=dict
    )  # parameter -> the values it may take
    minimum: dict[str, float] = field(
        default_factory=dict
    )  # numeric parameter -> least value (else 0)
    nodes: bool = (
        False  # it runs on every node's filesystem ($POWERCUT_MOUNTS): record --nodes N > 1
    )

    def params(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """Defaults overlaid with ``given``; unknown keys, values of the wrong type, out of range or
        not among the choices are a UsageError naming the parameter."""
        given = dict(given or {})
        unknown = set(given) - set(self.defaults)
        if unknown:
            raise UsageError(
                f"workload {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(self.defaults)) or 'none'}"
            )
        out = dict(self.defaults)
        for key, value in given.items():
            try:
                out[key] = self._typed(key, value)
            except (TypeError, ValueError) as e:
                raise UsageError(f"workload {self.name}: parameter {key} {e}") from None
        return out

    def _typed(self, key: str, value: Any) -> Any:
        want = type(self.defaults[key])
        if want is bool:
            v: Any = _as_bool(value)
        elif isinstance(value, want) and not isinstance(value, bool):
            v = value
        else:
            try:
                v = (
                    want(float(value))
                    if want is int and str(value).strip().endswith(".0")
                    else want(value)
                )
            except (TypeError, ValueError):
                raise ValueError(
                    f"wants {'an' if want is int else 'a'} {want.__name__}, not {value!r}"
                ) from None
        if key in self.choices:
            by_text = {str(c).lower(): c for c in self.choices[key]}
            if str(v).lower() not in by_text:
                raise ValueError(
                    f"must be one of {', '.join(map(str, self.choices[key]))}, not {value!r}"
                )
            v = by_text[str(v).lower()]
        elif want in (int, float) and v < self.minimum.get(key, 0):
            raise ValueError(f"must be at least {self.minimum.get(key, 0):g}, not {value!r}")
        return v


def names() -> list[str]:
    return registry.names(GROUP)


def get(name: str) -> Workload:
    return registry.load(
        GROUP,
        name,
        Workload,
        "unknown workload {name!r}; known: {known} (or give any command with --cmd)",
    )


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
        sys.stderr.write(
            "usage: python -m powercut.workload NAME   (params as JSON in $POWERCUT_PARAMS)\n"
        )
        return 2
    workload = get(args[0])
    params = workload.params(json.loads(environ.text(environ.PARAMS, "{}")))
    return int(workload.main(params) or 0)


if __name__ == "__main__":
    # Run through the package's own module object, so isinstance checks see one Workload class.
    from powercut.workload import main as _main

    sys.exit(_main())
