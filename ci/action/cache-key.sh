#!/usr/bin/env bash
# The action's cache-key step: the key the guest image is cached under (actions/cache, paths
# ~/.cache/powercut/kernels and ~/.cache/powercut/images): the Debian kernel package the image is
# built from (the one linux-image-amd64 resolves to, as powercut resolves it), powercut's version and
# a digest of the installed image sources (powercut/images: init.sh, modules.txt, the builder, ...),
# so a new kernel, a new release or a changed image builder each build a new image.
#
# Environment: PYTHON (the action's venv Python, with powercut).  Writes key=... and dir=... to
# $GITHUB_OUTPUT when set; prints the key.
set -euo pipefail
PY=${PYTHON:-python3}
say() { echo "powercut-action: $*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi

# apt-cache needs package lists (a fresh runner or container may have none)
if command -v apt-get >/dev/null && ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
    "${SUDO[@]}" apt-get update -q >/dev/null || say "apt-get update failed; the kernel package may not resolve"
fi
pkg=$("$PY" -c 'from powercut.images.build import resolve_kernel_package as r; print(r())' 2>/dev/null) || {
    say "cannot resolve the guest kernel package here (powercut setup will say why); caching under 'unresolved'"
    pkg=unresolved
}
read -r version digest < <("$PY" - <<'PY'
import hashlib
from importlib import resources
from importlib.metadata import version

h = hashlib.sha256()
root = resources.files("powercut.images")
for f in sorted((p for p in root.iterdir() if p.is_file() and not p.name.endswith(".pyc")), key=lambda p: p.name):
    h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
print(version("powercut"), h.hexdigest()[:12])
PY
)
key="powercut-guest-$pkg-$version-$digest"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    { echo "key=$key"; echo "dir=${POWERCUT_CACHE:-$HOME/.cache/powercut}"; } >> "$GITHUB_OUTPUT"
fi
echo "$key"
