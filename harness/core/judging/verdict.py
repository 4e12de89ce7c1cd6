"""The one verdict vocabulary (host and guest) and the verdict record a campaign journals.

Severity, worst last.  ``flaky`` is not a finding about the program under test: the state was
judged twice, alone the second time, and the two verdicts differ -- a harness problem, reported
apart from confirmed failures."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from powercut.core.judging.recoveryread import ReadFile
from powercut.core.states.stateid import LIE_MODELS

SEVERITY = (
    "pass",
    "detected",
    "fsck-error",
    "fail",
    "lost-ack",
    "corrupt-data",
    "silent-corruption",
    "acked-after-error",
    "checker-crashed",
    "mount-failed",
    "timeout",
    "kernel-panic",
    "flaky",
)
VERDICTS = frozenset(SEVERITY)
# what a checker may answer (the harness adds the others).  ``fail``: a checker command that said
# only "exit 1" -- a failure of a kind it did not name.  ``detected``: the program noticed damage
# (refused to open, reported a checksum or I/O error, repaired from a redundant copy);
# ``silent-corruption``: it served data that differs from what was acked or written, with no error.
CHECKER_VERDICTS = (
    "pass",
    "fail",
    "lost-ack",
    "corrupt-data",
    "checker-crashed",
    "detected",
    "silent-corruption",
)
FINDINGS = frozenset(SEVERITY) - {"pass", "flaky"}
# Under a lying-disk model (core/crashmodels/lies.py) the question is "noticed or served?": ``detected`` is a
# pass, and what the storage stack noticed on its own -- a mount that fails, an fsck that finds
# damage -- is ``detected`` too; a checker's ``corrupt-data`` (wrong data, and the program said
# nothing) is ``silent-corruption``.  Under a power-loss model an honest disk lost only what was not
# flushed: ``detected`` there is a finding (the program cannot recover from its own crash: it
# refuses or reports damage instead of serving the acked data), the mildest one.
AS_LIE = {"mount-failed": "detected", "fsck-error": "detected", "corrupt-data": "silent-corruption"}
# ``acked-after-error`` (the judge's, core/log/faultwindows.py): the state fails with every ack and passes with
# only the acks made before the program's first injected I/O error.


def check_name(verdict: str) -> str:
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; known: {', '.join(SEVERITY)}")
    return verdict


def is_pass(verdict: str, model: str) -> bool:
    """``pass``, or ``detected`` under a lying-disk model (the program noticed what the disk did)."""
    return verdict == "pass" or (verdict == "detected" and model in LIE_MODELS)


def lie_verdict(verdict: str, model: str) -> str:
    """What a state's verdict means under its model: under a lying-disk model, noticing by the
    filesystem (mount-failed, fsck-error) is ``detected`` and unflagged wrong data
    (``corrupt-data``) is ``silent-corruption``; under a power-loss model the verdict as it is."""
    return AS_LIE.get(verdict, verdict) if model in LIE_MODELS else verdict


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.index, default="pass")


@dataclass(frozen=True, slots=True)
class Verdict:
    """One judged state.  ``aliases``: other state ids with the same durable content and the same
    acked/begun keys, judged by this one.  ``confirmed``: a failure judged a second time, alone,
    with the same verdict.  ``by_group``: a failure not judged again itself, standing on its
    group's confirmation (core/judging/confirm.py: every sampled state of its group kept its verdict).
    For ``flaky``, ``first`` holds the first verdict and its reasons.  ``read``: judged with
    ``CheckContext.trace_reads``, the files its checker opened, in order (empty otherwise, or where
    tracing could not be done).  ``proof``: the state was not judged itself -- its image equals that
    judged state's on every sector that state's judge read, with the same checker input
    (core/judging/readset.py): its verdict, reasons and ``read`` are that state's."""

    state: str
    model: str
    cut: int
    verdict: str
    reasons: tuple[str, ...]
    acked: int
    begun: int
    seconds: float
    aliases: tuple[str, ...] = ()
    confirmed: bool = False
    first: tuple[str, ...] = ()
    by_group: bool = False
    read: tuple[
        ReadFile, ...
    ] = ()  # judged with trace_reads: what its checker opened (core/judging/recoveryread.py)
    proof: str = ""  # not judged: equal to this judged state on every sector its judge read

    @property
    def failed(self) -> bool:
        return not is_pass(self.verdict, self.model)

    @property
    def finding(self) -> bool:
        return self.verdict in FINDINGS and self.failed

    @property
    def confirmation(self) -> str:
        """``confirmed`` (judged again alone, same verdict), ``confirmed-by-group``, ``flaky``,
        ``unconfirmed`` (confirmation off or not reached); "" for a pass."""
        if self.verdict == "flaky":
            return "flaky"
        if not self.failed:
            return ""
        if self.confirmed:
            return "confirmed"
        elif self.by_group:
            return "confirmed-by-group"
        else:
            return "unconfirmed"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("reasons", "aliases", "first"):
            d[k] = list(d[k])
        if not self.aliases:
            del d["aliases"]
        if not self.first:
            del d["first"]
        if not self.by_group:
            del d["by_group"]
        if self.read:
            d["read"] = [r.to_json() for r in self.read]
        else:
            del d["read"]
        if not self.proof:
            del d["proof"]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Verdict":
        return Verdict(
            str(d["state"]),
            str(d["model"]),
            int(d["cut"]),
            check_name(d["verdict"]),
            tuple(d["reasons"]),
            int(d["acked"]),
            int(d["begun"]),
            float(d["seconds"]),
            tuple(d.get("aliases", ())),
            bool(d.get("confirmed", False)),
            tuple(d.get("first", ())),
            bool(d.get("by_group", False)),
            tuple(ReadFile.from_json(r) for r in d.get("read", ())),
            str(d.get("proof", "")),
        )
