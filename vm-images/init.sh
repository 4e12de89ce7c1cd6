#!/bin/busybox sh
# powercut guest init (PID 1 in the initramfs).
#  1. mount proc/sys/dev, load the modules listed in /etc/powercut/modules (dependency order)
#     and bring the loopback interface up (127.0.0.1; no other interface)
#  2. mount what /etc/powercut/mounts lists (vm-images/mounts.txt) under /newroot: the host root
#     read-only (virtiofs or 9p, tag "hostroot"), fresh tmpfs on /tmp and /run, the job share (tag
#     "job", read-write) on /run/powercut/job
#  3. chroot into the host root and run /run/powercut/job/job.sh
#  4. print "powercut-exit=<status>" on the console, write it to the job share, power off
# Kernel command line: powercut.transport=9p|virtiofs  powercut.probe=1 (accel probe: report and stop)
#   powercut.load=GROUP,... (load only modules of these groups, see modules.txt; default all)
#   powercut.mount=TAG,...  (more read-only shares, mounted at /run/powercut/TAG)
#   powercut.keep=PATH,...  (host paths under /tmp to keep visible over the guest's own /tmp)
#   powercut.template=1     (a checker VM's template, check/template.py: instead of 2-3, run the template
#                            agent from /pcroot, a root the host appended to this initramfs; it mounts
#                            the same table's mounts itself once the VM is restored, guest/template.py)
/bin/busybox mkdir -p /proc /sys /dev /newroot /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
export PATH=/bin

finish() {
    echo "powercut-exit=$1"
    sync
    # With QEMU's -no-reboot (libvirt: on_reboot=destroy) a reset ends the VM at once.
    reboot -f
    sleep 5
    poweroff -f
}

for arg in $(cat /proc/cmdline); do
    case "$arg" in
        powercut.transport=*) transport="${arg#powercut.transport=}" ;;
        powercut.probe=1) probe=1 ;;
        powercut.load=*) load="${arg#powercut.load=}" ;;
        powercut.mount=*) extra_mounts="${arg#powercut.mount=}" ;;
        powercut.keep=*) keep="${arg#powercut.keep=}" ;;
        powercut.template=1) template=1 ;;
    esac
done

if [ -n "$probe" ]; then
    echo "powercut-probe-ok"
    finish 0
fi

in_groups() {  # is any of the comma-separated groups $1 in powercut.load=?
    [ "$1" = "*" ] || [ -z "$load" ] && return 0
    for g in $(echo "$1" | tr , ' '); do
        case ",$load," in *",$g,"*) return 0 ;; esac
    done
    return 1
}
while read -r mod groups optional; do
    case "$mod" in ''|'#'*) continue ;; esac
    in_groups "$groups" || continue
    if ! insmod "$mod" 2>/tmp/insmod.err; then
        if grep -q 'File exists' /tmp/insmod.err; then continue; fi
        if [ "$optional" = optional ]; then continue; fi
        echo "powercut-init: cannot load $mod: $(cat /tmp/insmod.err)"
        finish 125
    fi
done < /etc/powercut/modules

# The mounts of the table $2 (vm-images/mounts.txt; its header says what each word means) under
# the root $1.  guest/template.py mounts the same table the same way (linux/mounts.guest_mounts).
fill() {  # $1 with its '%' replaced by $2
    case "$1" in *%*) printf '%s\n' "${1%%[%]*}$2${1#*[%]}" ;; *) printf '%s\n' "$1" ;; esac
}
mount_one() {  # WHEN SOURCE TARGET FSTYPE OPTIONS, SOURCE of a bind mount and TARGET under the root
    [ "$5" = - ] && set -- "$1" "$2" "$3" "$4" ""
    case "$4" in
        dir) mkdir -p "$3" || { echo "powercut-init: cannot make $3"; finish 125; }; return ;;
        bind) set -- "$1" "$2" "$3" none "bind${5:+,$5}" ;;
        9p) if [ "$transport" = virtiofs ]; then
                case ",$5," in *,ro,*) set -- "$1" "$2" "$3" virtiofs ro ;; *) set -- "$1" "$2" "$3" virtiofs "" ;; esac
            else
                set -- "$1" "$2" "$3" 9p "$ninep${5:+,$5}"
            fi ;;
    esac
    if [ "$1" = if-dir ]; then
        [ -d "$3" ] && mount -t "$4" ${5:+-o "$5"} "$2" "$3" 2>/dev/null
        return 0
    fi
    mkdir -p "$3" 2>/dev/null
    mount -t "$4" ${5:+-o "$5"} "$2" "$3" ||
        { echo "powercut-init: cannot mount $2 ($4${5:+ -o $5}) on $3"; finish 125; }
}
mount_table() {  # ROOT TABLE, with $transport, $keep and $extra_mounts from the command line
    kept=
    for path in $(echo "$keep" | tr , ' '); do
        case "$path" in /tmp/*) kept="$kept ${path#/tmp}" ;; esac
    done
    while read -r when src dst fstype opts; do
        case "$when" in
            ''|'#'*) continue ;;
            9p-options) ninep=$src; continue ;;
            kept) items=$kept ;;
            share) items=$(echo "$extra_mounts" | tr , ' ') ;;
            keep) items=${kept:+-} ;;
            *) items=- ;;
        esac
        for item in $items; do
            case "$fstype" in bind) s="$1$(fill "$src" "$item")" ;; *) s=$(fill "$src" "$item") ;; esac
            d="$1$(fill "$dst" "$item")"
            mount_one "$when" "$s" "${d%/}" "$fstype" "$opts"
        done
    done < "$2"
}
stamp() { read -r up _ < /proc/uptime; echo "powercut-init: $1 at ${up}s"; }
stamp "modules loaded"
# The loopback interface, up in every guest (a job's and a template's: a restored VM keeps it), so a
# client and a server of the program under test meet on 127.0.0.1 as they do at home; the kernel
# gives lo 127.0.0.1/8 and ::1 as it comes up.  No other interface exists: no network beyond it.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up || echo "powercut-init: cannot bring lo up"
if [ -n "$template" ]; then
    [ -f /pcroot/.powercut/python ] || { echo "powercut-init: no template root in the initramfs"; finish 125; }
    for d in proc sys dev tmp run; do mkdir -p "/pcroot/$d"; done
    mount -t proc proc /pcroot/proc
    mount -t sysfs sysfs /pcroot/sys
    mount -t devtmpfs devtmpfs /pcroot/dev
    # /tmp and /run stay the initramfs' own (writable): the runtime may hold a checkout under /tmp
    chmod 1777 /pcroot/tmp
    cp /etc/powercut/mounts /pcroot/.powercut/mounts   # the agent mounts these once restored
    stamp "template agent start"
    env -i PATH=/bin HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
        chroot /pcroot "$(cat /pcroot/.powercut/python)" -S /.powercut/boot.py </dev/null
    rc=$?
    job=/pcroot/.powercut/host/run/powercut/job
    if [ -d "$job" ]; then
        echo "$rc" > "$job/exit-status"
        sync
        umount "$job" 2>/dev/null
    fi
    finish "$rc"
fi
mount_table /newroot /etc/powercut/mounts

if [ ! -f /newroot/run/powercut/job/job.sh ]; then
    echo "powercut-init: the job share has no job.sh"
    finish 125
fi
stamp "job start"
chroot /newroot /bin/sh /run/powercut/job/job.sh </dev/null
rc=$?
echo "$rc" > /newroot/run/powercut/job/exit-status
sync
umount /newroot/run/powercut/job 2>/dev/null
finish "$rc"
