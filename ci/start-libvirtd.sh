#!/bin/sh
# Start a local libvirtd for powercut's libvirt backend and wait until qemu:///system answers.
#
#  * /etc/libvirt/qemu.conf (idempotently): QEMU runs as root:root with dynamic_ownership = 0, so the
#    guest can read the whole host root (shared read-only, including root-owned trees like
#    /root/.pyenv) and libvirt never chowns the caller's disk images, console files or kernels.
#  * virtlogd -d and libvirtd -d when not running (systemctl when systemd is PID 1); libvirtd runs
#    under a small python3 child subreaper that reaps the QEMU processes at once (see below).
#  * waits up to POWERCUT_LIBVIRTD_TIMEOUT seconds (default 60; the first start probes QEMU for a few seconds) for `virsh -c qemu:///system version`.
#
# Exit status: 0 ready; 77 this machine cannot run libvirtd at all (not installed, or not root and
# no daemon answering) -- callers may skip; 1 anything else (a real failure). One line on stderr.
set -u
URI=qemu:///system
TIMEOUT=${POWERCUT_LIBVIRTD_TIMEOUT:-60}
CONF=${POWERCUT_QEMU_CONF:-/etc/libvirt/qemu.conf}

REAPER='
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if subprocess.call(sys.argv[1:]) != 0:
    sys.exit(1)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
    except InterruptedError:
        continue
'

say() { echo "start-libvirtd: $*" >&2; }
answers() { virsh -c "$URI" version >/dev/null 2>&1; }
find_tool() { command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; }; }

VIRSH=$(find_tool virsh) || { say "cannot run libvirtd here: virsh not installed (apt-get install libvirt-clients libvirt-daemon-system)"; exit 77; }
LIBVIRTD=$(find_tool libvirtd) || { say "cannot run libvirtd here: libvirtd not installed (apt-get install libvirt-daemon-system)"; exit 77; }
VIRTLOGD=$(find_tool virtlogd) || { say "cannot run libvirtd here: virtlogd not installed (apt-get install libvirt-daemon-system)"; exit 77; }

if [ "$(id -u)" != 0 ]; then
    if answers; then say "not root: using the libvirtd already answering on $URI as configured"; exit 0; fi
    say "cannot run libvirtd here: not root and nothing answers on $URI"
    exit 77
fi

# set_conf KEY VALUE: make "KEY = VALUE" the one active setting in $CONF; prints "changed" if it edited.
set_conf() {
    key=$1 value=$2
    if grep -Eq "^[[:space:]]*$key[[:space:]]*=[[:space:]]*$value[[:space:]]*(#.*)?$" "$CONF"; then
        return 0
    fi
    tmp="$CONF.powercut.$$"
    grep -Ev "^[[:space:]]*$key[[:space:]]*=" "$CONF" > "$tmp" || true
    printf '%s = %s   # set by powercut ci/start-libvirtd.sh\n' "$key" "$value" >> "$tmp"
    cat "$tmp" > "$CONF" && rm -f "$tmp"
    echo changed
}

[ -f "$CONF" ] || { say "cannot run libvirtd here: $CONF missing (libvirt-daemon-driver-qemu not installed?)"; exit 77; }
changed=$( { set_conf user '"root"'; set_conf group '"root"'; set_conf dynamic_ownership 0; } )
[ -n "$changed" ] && say "updated $CONF (user/group root, dynamic_ownership 0)"

systemd=0
[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && command -v systemctl >/dev/null 2>&1 && systemd=1

if answers; then
    if [ -n "$changed" ]; then
        # The running daemon read the old qemu.conf: restart it (only through systemd; a daemon this
        # script did not start under systemd is not ours to kill).
        if [ $systemd = 1 ]; then
            systemctl restart libvirtd >/dev/null 2>&1 || { say "systemctl restart libvirtd failed"; exit 1; }
        else
            say "libvirtd is running with the old $CONF: restart it, then run this script again"
            exit 1
        fi
    else
        exit 0
    fi
elif [ $systemd = 1 ]; then
    systemctl start virtlogd libvirtd >/dev/null 2>&1 || { say "systemctl start libvirtd failed (journalctl -u libvirtd)"; exit 1; }
else
    pidof virtlogd >/dev/null 2>&1 || "$VIRTLOGD" -d || { say "virtlogd -d failed"; exit 1; }
    if ! pidof libvirtd >/dev/null 2>&1; then
        if PY=$(command -v python3); then
            # Under a child subreaper: libvirt daemonizes QEMU, so a finished QEMU becomes a zombie of the
            # nearest subreaper, else of PID 1, and libvirt waits for it to be reaped before it reports
            # the domain stopped; a container's PID 1 may reap only every second or two.
            setsid "$PY" -c "$REAPER" "$LIBVIRTD" -d </dev/null >/dev/null 2>&1 &
        else
            "$LIBVIRTD" -d || { say "libvirtd -d failed"; exit 1; }
        fi
    fi
fi

i=0
while [ "$i" -lt $((TIMEOUT * 5)) ]; do
    answers && exit 0
    sleep 0.2
    i=$((i + 1))
done
err=$("$VIRSH" -c "$URI" version 2>&1 | tail -n 1)
say "libvirtd did not answer on $URI within ${TIMEOUT} s: $err"
exit 1
