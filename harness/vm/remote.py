"""A remote libvirt host reached over ssh: the files a checker VM needs shipped there by content hash,
and the files the VM writes there (its console, the agent's progress, result and log) mirrored here.

libvirt's ``qemu+ssh://[user@]host[:port]/system?keyfile=K&command=SSH`` URI already names how to
reach the host; :class:`SshTarget` derives the same ssh invocation from it (the same user, port, key
and ssh program), adding connection sharing (``ControlMaster``) so that the polls of a running VM
cost one round trip each, not one login.  Nothing here assumes the two hosts share a filesystem.

Layout on the remote host, under ``root`` (``$POWERCUT_REMOTE_ROOT``, default ``/var/tmp/powercut-remote``):

* ``images/<image hash>/`` -- the guest image (kernel, initramfs, tools), shipped once, found by hash;
* ``recordings/<log sha256>/<log name>`` -- a recording's log, shipped once, found by hash;
* ``runs/<token>/`` -- one checker VM boot's job directory, scratch disk and console; removed when the
  boot ends (runs left by a killed powercut are swept after a day)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import parse_qs, unquote, urlsplit

from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import environ, process

DEFAULT_ROOT = "/var/tmp/powercut-remote"
SSH_TIMEOUT_S = 120.0
SWEEP_AFTER_MIN = 24 * 60
_CONTROL_DIR = Path(tempfile.gettempdir()) / f"powercut-ssh-{os.getuid()}"


@dataclass(frozen=True, slots=True)
class SshTarget:
    """How to run a command on the host of a ``qemu+ssh`` URI.  ``argv``: the ssh invocation up to the
    host (tests may use any program that runs ``sh -c`` on its last argument the same way)."""

    uri: str
    argv: tuple[str, ...]
    host: str

    @staticmethod
    def from_uri(uri: str) -> "SshTarget":
        parts = urlsplit(uri)
        transport = parts.scheme.partition("+")[2]
        if transport not in ("ssh", "libssh", "libssh2"):
            raise UsageError(
                f"--check-uri {uri}: a remote checker host is reached over ssh "
                f"(qemu+ssh://[user@]host[:port]/system), not {transport or 'a local socket'}"
            )
        if not parts.hostname:
            raise UsageError(f"--check-uri {uri}: no host in the URI")
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        argv = [unquote(q.get("command", "ssh")), "-o", "BatchMode=yes"]
        _CONTROL_DIR.mkdir(mode=0o700, exist_ok=True)
        argv += [
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={_CONTROL_DIR}/%C",
            "-o",
            "ControlPersist=60",
        ]
        if parts.port:
            argv += ["-p", str(parts.port)]
        if q.get("keyfile"):
            argv += ["-i", unquote(q["keyfile"])]
        if parts.username:
            argv += ["-l", unquote(parts.username)]
        return SshTarget(uri, (*argv, parts.hostname), parts.hostname)

    def run(
        self,
        script: str,
        *,
        stdin: bytes | None = None,
        timeout: float = SSH_TIMEOUT_S,
        check: bool = True,
    ) -> process.Result:
        """``sh -c script`` on the remote host through the process runner (ssh in its own process
        group, killed with it on a timeout or an interrupt); output as bytes.  A failure is one line
        naming the host."""
        try:
            res = process.run(
                [*self.argv, "sh -c " + shlex.quote(script)],
                input=stdin,
                timeout=timeout,
                check=False,
                text=False,
            )
        except EnvironmentNotReady:
            raise EnvironmentNotReady(
                f"cannot run {self.argv[0]} to reach {self.host}: not found"
            ) from None
        except OSError as e:
            raise EnvironmentNotReady(
                f"cannot run {self.argv[0]} to reach {self.host}: {e.strerror}"
            ) from None
        if res.timed_out:
            raise EnvironmentNotReady(
                f"{self.host}: no answer over ssh within {timeout:g} s ({self.uri})"
            )
        if check and res.returncode != 0:
            err = " | ".join(
                line.strip() for line in _text(res.stderr).splitlines() if line.strip()
            )
            raise EnvironmentNotReady(
                f"{self.host}: remote command failed (exit {res.returncode}): "
                f"{err[-300:] or 'no message'}"
            )
        return res

    def text(self, script: str, **kw) -> str:
        return _text(self.run(script, **kw).stdout)


def _text(out: str | bytes) -> str:
    """The runner's output (bytes: ``text=False``) as text."""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def remote_root() -> str:
    return environ.text(environ.REMOTE_ROOT, DEFAULT_ROOT)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(paths: list[Path], base: Path) -> str:
    """One digest over files (names relative to ``base`` and contents): what 'the same code' means."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(
            str(p.relative_to(base)).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest()
        )
    return h.hexdigest()


@dataclass(slots=True)
class Shipper:
    """Puts files on a remote host under ``root``, each found by content hash when already there."""

    target: SshTarget
    root: str = field(default_factory=remote_root)
    shipped: list[str] = field(
        default_factory=list
    )  # what this run had to copy (the rest was found)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not self.root.startswith("/") or self.root.rstrip("/") == "":
            raise UsageError(
                f"the remote root must be an absolute directory other than /, not {self.root!r} "
                "(POWERCUT_REMOTE_ROOT)"
            )
        self.root = self.root.rstrip("/")

    def ship_file(self, local: Path, sha256: str = "") -> str:
        """The remote path of ``local`` (a recording's log) under recordings/<sha256>/."""
        sha256 = sha256 or sha256_file(local)
        return f"{self.ship_files([local], [sha256])}/{local.name}"

    def ship_files(self, files: Sequence[Path], sha256s: Sequence[str] = ()) -> str:
        """The remote directory holding ``files`` (one recording's logs, every disk's), each under its
        own name: recordings/<key>/, the key being the one file's sha256, or for several the sha256 of
        their sha256s joined by ``+`` in order (so one disk's logs land where they always did)."""
        shas = list(sha256s) or [sha256_file(f) for f in files]
        key = shas[0] if len(shas) == 1 else hashlib.sha256("+".join(shas).encode()).hexdigest()
        d = f"{self.root}/recordings/{key}"
        with self._lock:
            if self.target.run(f"test -f {shlex.quote(d)}/.complete", check=False).returncode == 0:
                return d
            for local, sha256 in zip(files, shas):
                remote = f"{d}/{local.name}"
                with open(local, "rb") as f:
                    data = f.read()
                got = self.target.text(
                    f"set -e; mkdir -p {shlex.quote(d)}; cat > {shlex.quote(remote)}.part; "
                    f"sha256sum {shlex.quote(remote)}.part",
                    stdin=data,
                    timeout=SSH_TIMEOUT_S + len(data) / 1e6,
                ).split()[:1]
                if got != [sha256]:
                    raise EnvironmentNotReady(
                        f"{self.target.host}: {local.name} arrived with sha256 {got[:1]}, "
                        f"not {sha256[:16]}: the copy is damaged"
                    )
                self.target.run(f"mv {shlex.quote(remote)}.part {shlex.quote(remote)}")
                self.shipped.append(str(local))
            self.target.run(f"touch {shlex.quote(d)}/.complete")
        return d

    def ship_tree(self, local_dir: Path, key: str, kind: str = "images") -> str:
        """The remote copy of the directory ``local_dir`` (a guest image) under <kind>/<key>/."""
        d = f"{self.root}/{kind}/{key}"
        with self._lock:
            if self.target.run(f"test -f {shlex.quote(d)}/.complete", check=False).returncode == 0:
                return d
            with tempfile.TemporaryFile() as buf:
                with tarfile.open(fileobj=buf, mode="w") as tar:
                    tar.add(str(local_dir), arcname=".")
                buf.seek(0)
                data = buf.read()
            self.target.run(
                f"set -e; rm -rf {shlex.quote(d)}; mkdir -p {shlex.quote(d)}; "
                f"tar -C {shlex.quote(d)} -xf -; touch {shlex.quote(d)}/.complete",
                stdin=data,
                timeout=SSH_TIMEOUT_S + len(data) / 1e6,
            )
            self.shipped.append(str(local_dir))
        return d

    def new_run(self, name: str, files: dict[str, bytes], sparse: dict[str, int]) -> str:
        """A fresh run directory holding ``files`` (relative name -> bytes, e.g. job/job.json) and sparse
        files of the given sizes (a scratch disk); runs older than a day (a killed powercut) are swept."""
        runs = f"{self.root}/runs"
        d = f"{runs}/{name}"
        script = [
            f"set -e; mkdir -p {shlex.quote(runs)}",
            f"find {shlex.quote(runs)} -mindepth 1 -maxdepth 1 -mmin +{SWEEP_AFTER_MIN} -exec rm -rf {{}} + "
            "2>/dev/null || true",
            f"rm -rf {shlex.quote(d)}; mkdir -p {shlex.quote(d)}",
        ]
        payload = b""
        for rel, data in files.items():
            p = f"{d}/{rel}"
            script.append(
                f"mkdir -p {shlex.quote(os.path.dirname(p))}; head -c {len(data)} > {shlex.quote(p)}"
            )
            payload += data
        for rel, size in sparse.items():
            script.append(f"truncate -s {size} {shlex.quote(d + '/' + rel)}")
        self.target.run("; ".join(script), stdin=payload)
        return d

    def remove(self, remote_dir: str) -> None:
        if remote_dir.startswith(self.root + "/runs/"):
            self.target.run(f"rm -rf {shlex.quote(remote_dir)}", check=False)


class Mirror:
    """Local copies of files a remote VM writes: append-only ones (console, progress) fetched from
    where the last fetch stopped, the others (result, agent log) whole.  ``sync`` is called from the
    VM's wait loop; readers use :meth:`local` paths as if the VM ran here."""

    def __init__(
        self,
        target: SshTarget,
        remote_dir: str,
        local_dir: Path,
        appended: tuple[str, ...],
        whole: tuple[str, ...] = (),
    ) -> None:
        self.target = target
        self.remote_dir = remote_dir
        self.local_dir = Path(local_dir)
        self.appended, self.whole = appended, whole
        self.offsets = {rel: 0 for rel in appended}
        for rel in appended:
            p = self.local_dir / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"")

    def local(self, remote_path: str) -> Path:
        rel = os.path.relpath(remote_path, self.remote_dir)
        if rel.startswith(".."):
            raise ValueError(f"{remote_path} is not under {self.remote_dir}")
        return self.local_dir / rel

    def sync(self, *, final: bool = False) -> None:
        """One round trip: each appended file's new bytes (a header line 'rel size' per file, then
        the bytes from the last offset); with ``final``, the whole files too."""
        parts = []
        for rel, off in self.offsets.items():
            f = shlex.quote(f"{self.remote_dir}/{rel}")
            parts.append(
                f"s=$(stat -c %s {f} 2>/dev/null || echo 0); [ $s -ge {off} ] || s={off}; "
                f'echo "{rel} $((s-{off}))"; tail -c +{off + 1} {f} 2>/dev/null | head -c $((s-{off}))'
            )
        for rel in self.whole if final else ():
            f = shlex.quote(f"{self.remote_dir}/{rel}")
            parts.append(
                f's=$(stat -c %s {f} 2>/dev/null || echo -1); echo "={rel} $s"; '
                f"[ $s -lt 0 ] || head -c $s {f}"
            )
        res = self.target.run("; ".join(parts), check=final)
        if res.returncode != 0:
            return  # a lost round trip: the next one fetches from the same offsets
        out, pos = cast(bytes, res.stdout), 0  # run with text=False: bytes
        while (nl := out.find(b"\n", pos)) >= 0:
            rel, _, n = out[pos:nl].decode().rpartition(" ")
            size = int(n)
            pos = nl + 1
            data = out[pos : pos + max(size, 0)]
            pos += max(size, 0)
            if rel.startswith("="):
                if size >= 0:
                    (self.local_dir / rel[1:]).write_bytes(data)
                continue
            with open(self.local_dir / rel, "ab") as fh:
                fh.write(data)
            self.offsets[rel] += len(data)


CODE_PACKAGES = ("powercut", "powercut.checkers", "powercut.workloads")


def code_digest() -> str:
    """A digest of the powercut code a checker VM's agent runs (the package, the built-in checkers and
    workloads): the remote host's must equal this one's, or its verdicts would come from other code."""
    files = []
    h = hashlib.sha256()
    for pkg in CODE_PACKAGES:
        spec = importlib.util.find_spec(pkg)
        base = Path(list(spec.submodule_search_locations or [])[0]) if spec else None
        if base is None:
            continue
        files = [p for p in base.rglob("*.py") if "__pycache__" not in p.parts]
        h.update(pkg.encode() + b"\0" + tree_digest(files, base).encode())
    return h.hexdigest()[:16]
