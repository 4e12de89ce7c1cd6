#!/usr/bin/env bash
# The action's KVM step (action.yml, mode shard): make /dev/kvm usable the way GitHub's hosted
# runners need (a udev rule giving every user access; the runner's user is not in the kvm group),
# then say whether the VMs will get KVM.
#
# Environment: ACCEL (auto | kvm | tcg; default kvm), KVM_DEVICE (/dev/kvm).
# Exit status: 0 ready (or tcg: nothing to do; or auto: VMs will fall back to TCG, with a warning),
# 1 KVM was asked for and /dev/kvm is missing or not accessible, 2 a bad ACCEL.
# Root in a container (no udevadm, or no sudo) skips the rule: root opens /dev/kvm as it is.
set -euo pipefail
ACCEL=${ACCEL:-kvm}
DEV=${KVM_DEVICE:-/dev/kvm}
say() { echo "powercut-action: $*" >&2; }
annotate() {   # LEVEL TEXT: a GitHub annotation under GitHub Actions, a plain line elsewhere
    if [ "${GITHUB_ACTIONS:-}" = true ]; then echo "::$1 title=powercut::$2"; else say "$1: $2"; fi
}

case "$ACCEL" in
    auto|kvm) ;;
    tcg) say "accel tcg: the VMs run under TCG (software emulation); KVM is not enabled"; exit 0 ;;
    *) say "accel wants auto, kvm or tcg, not '$ACCEL'"; exit 2 ;;
esac

if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else SUDO=(none); fi
if [ -e "$DEV" ] && [ "${SUDO[0]:-}" != none ] && command -v udevadm >/dev/null && [ -d /etc/udev/rules.d ]; then
    echo 'KERNEL=="kvm", GROUP="kvm", MODE="0666", OPTIONS+="static_node=kvm"' |
        "${SUDO[@]}" tee /etc/udev/rules.d/99-kvm4all.rules >/dev/null
    "${SUDO[@]}" udevadm control --reload-rules
    "${SUDO[@]}" udevadm trigger --name-match=kvm
    "${SUDO[@]}" udevadm settle --timeout=10 || true
fi

if [ -r "$DEV" ] && [ -w "$DEV" ]; then
    say "KVM: $DEV is usable ($(stat -c '%A %U:%G' "$DEV"))"
    exit 0
fi
why="$DEV is $([ -e "$DEV" ] && echo "not accessible ($(stat -c '%A %U:%G' "$DEV"))" || echo missing)"
if [ "$ACCEL" = kvm ]; then
    annotate error "accel kvm: $why: this runner cannot run the VMs under KVM (use a runner with KVM, or accel auto/tcg)"
    exit 1
fi
annotate warning "accel auto: $why: the VMs will run under TCG (software emulation, several times slower)"
