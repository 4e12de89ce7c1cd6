"""The GitHub Action's merged result in words (host): ``summary.md`` for the job summary
(``$GITHUB_STEP_SUMMARY``: the verdict, every test, the failure groups with their ``powercut repro``
commands, the problems, the artifacts) and ``report.html`` (the same on one page, linking each crash
test's own report).  ``ghsummary`` reads the shards and builds the ``Merged`` these render."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from typing import Any

TESTS = "tests"  # OUT/tests/<test slug>: the plugin's --powercut-out
STATUS_WORDS = {0: "pass", 3: "fail", 1: "error"}


@dataclass(slots=True)
class Case:
    """One test of one shard, as its JUnit case and (for a crash test) its check output say."""

    nodeid: str
    shard: str
    result: str  # passed, failed, error, skipped
    message: str = ""
    props: dict[str, str] = field(default_factory=dict)
    slug: str = ""  # tests/<slug> in the merge (crash tests)
    groups: list[dict[str, Any]] = field(default_factory=list)

    @property
    def crash(self) -> bool:
        return "powercut_verdict" in self.props or bool(self.slug)

    def line(self) -> str:
        """The test's one line: the failure's headline, else its verdict and coverage."""
        if self.message:  # pytest.fail's words come as "Failed: ..."
            return self.message.removeprefix("Failed: ").removeprefix("powercut: ")
        if "powercut_verdict" in self.props:
            return f"{self.props['powercut_verdict']} ({self.props.get('powercut_coverage', '')})".replace(
                " ()", ""
            )
        return self.result


@dataclass(slots=True)
class Merged:
    cases: list[Case]
    shards: list[str]
    missing: list[str]
    problems: list[str]
    status: int
    headline: str
    artifacts: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "verdict": STATUS_WORDS[self.status],
            "headline": self.headline,
            "shards": self.shards,
            "missing": self.missing,
            "problems": self.problems,
            "tests": [
                {
                    "test": c.nodeid,
                    "shard": c.shard,
                    "result": c.result,
                    "line": c.line(),
                    "report": f"{TESTS}/{c.slug}/check/report.html" if c.slug else "",
                    "groups": c.groups,
                }
                for c in self.cases
            ],
        }


def _run_url() -> str:
    env = os.environ
    if env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        return (
            f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{env['GITHUB_REPOSITORY']}/actions/runs/"
            f"{env['GITHUB_RUN_ID']}"
        )
    return ""


def _md(text: str) -> str:
    """Text for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(m: Merged, *, artifact_prefix: str = "powercut", run_url: str | None = None) -> str:
    """The job summary: the verdict, every test's line, the failure groups with their repro commands,
    the problems and the artifacts."""
    run_url = _run_url() if run_url is None else run_url
    mark = {0: ":white_check_mark:", 3: ":x:", 1: ":warning:"}[m.status]
    lines = [f"## {mark} powercut crash tests: {STATUS_WORDS[m.status]}", "", m.headline, ""]
    if m.problems:
        lines += ["### Problems", ""] + [f"- {_md(p)}" for p in m.problems] + [""]
    if m.cases:
        lines += ["| test | shard | result | verdict |", "| --- | --- | --- | --- |"]
        for c in m.cases:
            lines.append(f"| `{_md(c.nodeid)}` | {c.shard} | {c.result} | {_md(c.line())} |")
        lines.append("")
    failing = [c for c in m.cases if c.result in ("failed", "error")]
    if failing:
        lines += ["### Failures", ""]
        for c in failing:
            lines += [f"#### `{c.nodeid}` (shard {c.shard})", "", _md(c.line()), ""]
            for k, g in enumerate(c.groups, 1):
                mini = (
                    f"; minimized: {g['first']} -> {g['minimized']}"
                    if g["minimized"]
                    else f"; first: {g['first']}"
                )
                lines.append(f"{k}. **{g['verdict']}** x {g['count']}: {_md(g['cause'])}{mini}")
                for b in g["blame"][:1]:
                    lines.append(f"   - blame: {_md(b if len(b) <= 200 else b[:195] + ' [...]')}")
                if g["bundle"]:
                    lines += ["", "   ```sh", f"   powercut repro {g['bundle']}", "   ```"]
            if c.slug:
                lines.append(f"\nreport: `{TESTS}/{c.slug}/check/report.html`")
            lines.append("")
        lines += [
            f"The repro commands run from the directory the artifact `{artifact_prefix}-merged` is unpacked "
            "into, on a machine with powercut and the project's test files at the path the runner had.",
            "",
        ]
    lines += [
        "### Artifacts",
        "",
        f"- `{artifact_prefix}-merged`: `junit.xml`, `report.html`, `summary.json`, each crash test's check "
        f"output and repro bundles under `{TESTS}/`",
    ]
    lines += [f"- `{a}`: that shard's pytest output" for a in m.artifacts]
    if run_url:
        lines += ["", f"[The run's artifacts]({run_url}#artifacts)"]
    return "\n".join(lines) + "\n"


CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.3em .5em;text-align:left;"
    "vertical-align:top}th{background:#f3f3f3}.passed{color:#17622d}.failed,.error{color:#a4161a;font-weight:600}"
    ".skipped{color:#777}code,pre{background:#f6f6f6;padding:.1em .3em}pre{padding:.5em;overflow-x:auto}"
    "h1 small{font-weight:400;font-size:60%}"
)


def page(m: Merged) -> str:
    """report.html: one page for every shard."""
    e = html.escape
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>powercut crash tests: "
        f"{e(STATUS_WORDS[m.status])}</title><style>{CSS}</style></head><body>",
        f"<h1>powercut crash tests: {e(STATUS_WORDS[m.status])} <small>{len(m.shards)} shard(s)</small></h1>",
        f"<p>{e(m.headline)}</p>",
    ]
    if m.problems:
        out.append(
            "<h2>Problems</h2><ul>" + "".join(f"<li>{e(p)}</li>" for p in m.problems) + "</ul>"
        )
    out.append(
        "<h2>Tests</h2><table><tr><th>test</th><th>shard</th><th>result</th><th>verdict</th><th>report</th></tr>"
    )
    for c in m.cases:
        link = f'<a href="{e(TESTS)}/{e(c.slug)}/check/report.html">report</a>' if c.slug else ""
        out.append(
            f"<tr><td><code>{e(c.nodeid)}</code></td><td>{e(c.shard)}</td><td class={e(c.result)}>"
            f"{e(c.result)}</td><td>{e(c.line())}</td><td>{link}</td></tr>"
        )
    out.append("</table>")
    failing = [c for c in m.cases if c.result in ("failed", "error")]
    if failing:
        out.append("<h2>Failures</h2>")
    for c in failing:
        out.append(f"<h3><code>{e(c.nodeid)}</code></h3><p>{e(c.line())}</p><ol>")
        for g in c.groups:
            mini = (
                f"minimized: {g['first']} -> {g['minimized']}"
                if g["minimized"]
                else f"first: {g['first']}"
            )
            out.append(
                f"<li><b>{e(str(g['verdict']))}</b> x {e(str(g['count']))}: {e(g['cause'])}; {e(mini)}"
                + "".join(f"<br>blame: {e(b)}" for b in g["blame"])
                + (f"<pre>powercut repro {e(g['bundle'])}</pre>" if g["bundle"] else "")
                + "</li>"
            )
        out.append("</ol>")
    out.append("</body></html>\n")
    return "\n".join(out)
