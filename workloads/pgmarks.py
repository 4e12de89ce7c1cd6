"""Marks from psql sessions (guest): a psql script marks through its ``\\!`` shell command, which
writes ``<session> <mark>`` on a pipe and waits for ``ok`` on its session's own pipe; a thread of
the workload makes each mark (powercut.mark) and answers.  Anything but ``ok`` kills that psql (the
shell's $PPID), which stops the session.  pgsync (one session) and pggroup (several at once) mark
this way: a mark is made before the shell returns, so an ack follows its COMMIT's return."""

from __future__ import annotations

import os
import threading

import powercut


def mark_command(req: int, resp: int, s: int) -> str:
    """Session ``s``'s ``\\!`` command taking the mark as its last word: ``<s> <mark>`` on fd ``req``,
    then ``ok`` awaited on fd ``resp``; anything else kills psql (its $PPID), which stops the session."""
    return (
        f'pcm() {{ echo "{s} $1" >/proc/self/fd/{req} && read -r pcm_r </proc/self/fd/{resp} && '
        '[ "$pcm_r" = ok ] || kill $PPID; }; pcm'
    )


class Marker(threading.Thread):
    """Makes the marks the sessions' shells ask for, one at a time, answering each on its session's pipe."""

    def __init__(self, sessions: int) -> None:
        super().__init__(name="pg-marker", daemon=True)
        self.req_r, self.req_w = os.pipe()
        self.resp = {s: os.pipe() for s in range(1, sessions + 1)}  # s -> (read end, write end)
        self.error: BaseException | None = None
        self.made: list[str] = []

    def command(self, s: int) -> str:
        return mark_command(self.req_w, self.resp[s][0], s)

    def fds(self, s: int) -> tuple[int, int]:
        """The descriptors session ``s``'s psql inherits."""
        return self.req_w, self.resp[s][0]

    def run(self) -> None:
        with os.fdopen(self.req_r, "rb", buffering=0) as req:
            buf = b""
            while chunk := req.read(512):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.answer(line.decode(errors="replace"))
        for _, w in self.resp.values():
            os.close(w)

    def answer(self, line: str) -> None:
        """One request ``<s> <mark>``: marked, then ``ok`` (``failed`` if the mark failed)."""
        s_text, _, text = line.strip().partition(" ")
        s = int(s_text) if s_text.isdigit() and int(s_text) in self.resp else 0
        try:
            if not s:
                raise ValueError(f"a mark request from no session: {line!r}")
            powercut.mark(text)
            self.made.append(text)
            answer = b"ok\n"
        except Exception as e:  # noqa: BLE001 -- said by the workload; the session's psql is stopped by its shell
            self.error = e
            answer = b"failed\n"
        if s:
            os.write(self.resp[s][1], answer)

    def close_client_ends(self) -> None:
        """After every psql exited: our copies of the ends they used (the thread then sees end of file)."""
        os.close(self.req_w)
        for r, _ in self.resp.values():
            os.close(r)
