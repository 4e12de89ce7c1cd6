#!/bin/busybox sh
# powercut guest init (PID 1 in the initramfs).
#  1. mount proc/sys/dev, load the modules listed in /etc/powercut/modules (dependency order)
#  2. mount the host root read-only (virtiofs or 9p, tag "hostroot") on /newroot, with fresh
#     tmpfs on /tmp and /run, and the job share (tag "job", read-write) on /run/powercut/job
#  3. chroot into the host root and run /run/powercut/job/job.sh
#  4. print "powercut-exit=<status>" on the console, write it to the job share, power off
# Kernel command line: powercut.transport=9p|virtiofs  powercut.probe=1 (accel probe: report and stop)
#   powercut.load=GROUP,... (load only modules of these groups, see modules.txt; default all)
#   powercut.mount=TAG,...  (more read-only shares, mounted at /run/powercut/TAG)
#   powercut.keep=PATH,...  (host paths under /tmp to keep visible over the guest's own /tmp)
#   powercut.template=1     (a checker VM's template, check/template.py: instead of 2-3, run the template
#                            agent from /pcroot, a root the host appended to this initramfs; it mounts
#                            the shares itself once the VM is restored, guest/template.py)
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

stamp() { read -r up _ < /proc/uptime; echo "powercut-init: $1 at ${up}s"; }
stamp "modules loaded"
if [ -n "$template" ]; then
    [ -f /pcroot/.powercut/python ] || { echo "powercut-init: no template root in the initramfs"; finish 125; }
    for d in proc sys dev tmp run; do mkdir -p "/pcroot/$d"; done
    mount -t proc proc /pcroot/proc
    mount -t sysfs sysfs /pcroot/sys
    mount -t devtmpfs devtmpfs /pcroot/dev
    # /tmp and /run stay the initramfs' own (writable): the runtime may hold a checkout under /tmp
    chmod 1777 /pcroot/tmp
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
case "$transport" in
    virtiofs) mount -t virtiofs -o ro hostroot /newroot ;;
    *) mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /newroot ;;
esac || { echo "powercut-init: cannot mount the host root over ${transport:-9p}"; finish 125; }

mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mount -t tmpfs -o mode=755 tmpfs /newroot/run
# The guest gets a fresh, writable /tmp.  Host paths under /tmp that the job needs (a checkout or
# a virtualenv living there: powercut.keep=PATH,...) stay visible: bind them back from the host's.
if [ -n "$keep" ]; then
    mkdir -p /newroot/run/powercut/hosttmp
    mount --bind /newroot/tmp /newroot/run/powercut/hosttmp
fi
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
for path in $(echo "$keep" | tr , ' '); do
    case "$path" in /tmp/*) ;; *) continue ;; esac
    mkdir -p "/newroot$path"
    mount --bind "/newroot/run/powercut/hosttmp${path#/tmp}" "/newroot$path" ||
        { echo "powercut-init: cannot keep $path visible"; finish 125; }
done
mkdir -p /newroot/run/powercut/job /newroot/run/powercut/mnt
case "$transport" in
    virtiofs) mount -t virtiofs job /newroot/run/powercut/job ;;
    *) mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /newroot/run/powercut/job ;;
esac || { echo "powercut-init: cannot mount the job share"; finish 125; }
for tag in $(echo "$extra_mounts" | tr , ' '); do  # more read-only shares, at /run/powercut/<tag>
    mkdir -p "/newroot/run/powercut/$tag"
    case "$transport" in
        virtiofs) mount -t virtiofs -o ro "$tag" "/newroot/run/powercut/$tag" ;;
        *) mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro "$tag" "/newroot/run/powercut/$tag" ;;
    esac || { echo "powercut-init: cannot mount the share $tag"; finish 125; }
done
[ -d /newroot/sys/kernel/config ] && mount -t configfs configfs /newroot/sys/kernel/config 2>/dev/null

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
