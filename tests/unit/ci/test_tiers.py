"""Which tests run where (tests/README.md "Which tests run where"): every test marked ``nightly`` is
in the table, each with a test of the README's test command that covers its capability; those
exist and are not nightly; and ci/test.sh leaves the nightly tests out unless asked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def collected(marker: str) -> set[str]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker,
            "tests",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode in (0, 5), res.stdout[-2000:] + res.stderr[-2000:]
    return {line.strip() for line in res.stdout.splitlines() if "::" in line}


def table() -> list[tuple[str, str]]:
    text = (ROOT / "tests" / "README.md").read_text()
    section = text.split("## Which tests run where", 1)[1]
    return [
        (m.group(1), m.group(2))
        for m in re.finditer(r"^\| `([^`]+)` \| [^|]+ \| `([^`]+)` \|$", section, re.M)
    ]


def covers(entry: str, test: str) -> bool:
    """A table entry names one test, or every parameter of a test function when it has no [...]."""
    return test == entry or ("[" not in entry and test.startswith(entry + "["))


def test_every_nightly_test_is_in_the_table_with_a_fast_test_that_covers_it() -> None:
    rows = table()
    assert len(rows) >= 5, "the table of nightly tests is missing from tests/README.md"
    nightly, fast = collected("nightly"), collected("not nightly")
    assert nightly, "no test is marked nightly: the table says which are"
    missing = sorted(t for t in nightly if not any(covers(entry, t) for entry, _ in rows))
    assert not missing, f"nightly tests not in tests/README.md's table: {missing}"
    for entry, cover in rows:
        assert any(covers(entry, t) for t in nightly), (
            f"{entry} is in the table but not marked nightly"
        )
        assert any(covers(cover, t) for t in fast), (
            f"{cover} (covering {entry}) is not a test of the README's test command"
        )


def test_ci_test_sh_leaves_the_nightly_tests_out_unless_asked() -> None:
    script = (ROOT / "ci" / "test.sh").read_text()
    assert (
        'tier=(-m "not nightly")' in script and '"--nightly"' in script and '"${tier[@]}"' in script
    )
    workflow = (ROOT / ".github" / "workflows" / "suite-nightly.yml").read_text()
    assert "bash ci/test.sh --nightly" in workflow
