#!/usr/bin/env bash
# The action's install step: a virtual environment with powercut, pytest and the project's own
# dependencies; its Python goes to the step's output `python` (and is printed).
#
# Environment: PYTHON (the interpreter to build it from, >= 3.11; default python3), VENV (default
# $RUNNER_TEMP/powercut-venv), POWERCUT (what pip installs as powercut; default the checkout this
# script is in: the action's own), INSTALL (more pip arguments, e.g. "-e ." or "-r requirements.txt";
# shell words), WITH_PYTEST (1; 0 for the merge, which needs none).
# On a bare Debian/Ubuntu container without Python, python3 and python3-venv are installed first.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
VENV=${VENV:-${RUNNER_TEMP:-/tmp}/powercut-venv}
POWERCUT=${POWERCUT:-$here}
say() { echo "powercut-action: $*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi

apt_python() {
    command -v apt-get >/dev/null || return 1
    say "installing python3 and python3-venv with apt-get"
    "${SUDO[@]}" apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends python3 python3-venv \
        >/dev/null
}
if ! command -v "$PYTHON" >/dev/null; then
    if [ "$PYTHON" != python3 ] || ! apt_python; then say "no Python '$PYTHON' on this runner"; exit 1; fi
fi
py=$(command -v "$PYTHON")
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    { say "powercut needs Python >= 3.11; $py is $("$py" -c 'import sys; print(sys.version.split()[0])')"; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
    "$py" -m venv "$VENV" 2>/dev/null || { apt_python && "$py" -m venv "$VENV"; } ||
        { say "cannot make a virtual environment with $py (install python3-venv)"; exit 1; }
fi
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
extra=()
[ "${WITH_PYTEST:-1}" = 0 ] || extra+=(pytest)
say "installing powercut from $POWERCUT"
"${pip[@]}" "$POWERCUT" "${extra[@]}"
if [ -n "${INSTALL:-}" ]; then
    split=$("$VENV/bin/python" -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$INSTALL" \
        2>/dev/null) || { say "install: not shell words (an unclosed quote?): $INSTALL"; exit 2; }
    mapfile -t words <<< "$split"
    say "installing the project's dependencies: pip install ${words[*]}"
    "${pip[@]}" "${words[@]}"
fi
say "powercut $("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("powercut"))') in $VENV"
[ -z "${GITHUB_OUTPUT:-}" ] || echo "python=$VENV/bin/python" >> "$GITHUB_OUTPUT"
echo "$VENV/bin/python"
