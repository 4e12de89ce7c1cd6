#!/usr/bin/env bash
# Idempotent setup for a fresh Debian/Ubuntu machine, as root: Debian packages, Python deps (this
# checkout installed editable), the guest image (`powercut setup --dev`).  Quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "setup: $*"; }
PY=${PYTHON:-python3}

[ "$(id -u)" = 0 ] || { echo "setup: must run as root (loop devices, dm, mount, apt-get)" >&2; exit 1; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "setup: needs Python >= 3.11 ($PY)" >&2; exit 1; }

# Debian packages: the one list is harness/linux/packages.py (what `powercut setup` installs); run
# from the checkout before powercut is installed (libvirt-python builds against libvirt-dev), with
# --dev for this repository's own tests (libvirt, PostgreSQL, Chromium, ...)
"$PY" harness/linux/packages.py --dev | sed 's/^packages: /setup: /' || exit 1

here=$(pwd -P)
installed=$("$PY" -c 'import os, powercut; print(os.path.dirname(os.path.realpath(powercut.__file__)))' 2>/dev/null || true)
# the package metadata (entry points of the built-in workloads and checkers) comes from
# pyproject.toml: reinstall when it changed since the last install of this checkout
stamp="${XDG_CACHE_HOME:-$HOME/.cache}/powercut/installed-pyproject"
want="$here $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$installed" != "$here/harness" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] ||
   ! "$PY" -c 'import rich, tomli_w, jinja2, pytest, hypothesis, libvirt, ZODB, matplotlib, mypy, ruff' 2>/dev/null; then
    say "installing powercut (editable) and its Python deps from $here"
    "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".[test,libvirt,apps,bench]"
    mkdir -p "$(dirname "$stamp")" && echo "$want" > "$stamp"
fi

# actionlint (tests/unit/test_workflow.py validates .github/workflows with it): a pinned release built
# from the Go module proxy (checksummed by sum.golang.org) with the machine's Go toolchain
ACTIONLINT_VERSION=v1.7.7
bin="${XDG_CACHE_HOME:-$HOME/.cache}/powercut/bin"
if [ ! -x "$bin/actionlint" ] || ! "$bin/actionlint" -version 2>/dev/null | grep -q "${ACTIONLINT_VERSION#v}"; then
    go=$(command -v go || echo /usr/local/go/bin/go)
    if [ ! -x "$go" ]; then
        say "installing Go (for actionlint)"
        apt-get install -y -q --no-install-recommends golang-go >/tmp/powercut-apt.log 2>&1 || true
        go=$(command -v go || echo /usr/lib/go/bin/go)
    fi
    say "building actionlint $ACTIONLINT_VERSION from the Go module proxy"
    mkdir -p "$bin"
    GOBIN="$bin" GOTOOLCHAIN=auto "$go" install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" ||
        { echo "setup: cannot build actionlint $ACTIONLINT_VERSION with $go" >&2; exit 1; }
fi

# the guest image and the KVM probe (the Debian packages are there by now: this only checks them)
"$PY" -m powercut.cli setup --dev | sed 's/^/setup: /'

# the etcd workload's pinned etcd (built once from the Go module proxy into /var/cache/powercut/etcd, which
# the recording guest sees; skipped when it is there)
# the one program here that needs a toolchain Debian 12 lacks (Go >= 1.23): without Go the etcd rows and
# tests are skipped, and this says so; with Go a failed build stops the setup
# then the gotwofile workload's Go program (standard library only, no download: into
# /var/cache/powercut/gotwofile, named by its source's digest; skipped when it is there)
if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
    PATH="$PATH:/usr/local/go/bin" "$PY" -m powercut.workloads.etcd --build | sed 's/^/setup: /' || exit 1
    PATH="$PATH:/usr/local/go/bin" "$PY" -m powercut.workloads.gotwofile --build | sed 's/^/setup: /' || exit 1
else
    say "etcd: no Go toolchain (Go >= 1.23 from go.dev): the etcd workload and its tests are skipped"
    say "gotwofile: no Go toolchain: the gotwofile workload and its tests are skipped"
fi

# the corpus entry the README's test command runs (tests/vm/test_corpus_vm.py): redb's two releases,
# built once from crates.io into /var/cache/powercut/corpus (skipped when they are there); without
# cargo that test is skipped, and this says so (the nightly builds every entry: ci/nightly.sh corpus)
if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
    PATH="$PATH:$HOME/.cargo/bin" "$PY" -m powercut.cli corpus --build-only redb-reopen-after-crash |
        sed 's/^/setup: corpus: /' || exit 1
else
    say "corpus: no Rust toolchain (cargo): the corpus entry's test is skipped"
fi

# the postgres workload's prepared cluster (initdb once here: under TCG it takes a minute per recording)
say "postgres cluster: $("$PY" -m powercut.workloads.postgres --prepare 2>&1 | tail -1)"
