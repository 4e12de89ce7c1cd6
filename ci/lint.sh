#!/usr/bin/env bash
# Lint and type check, from the repository root: `ruff check .` (the rules in pyproject.toml's
# [tool.ruff]), `ruff format --check .` (the code is formatted: run `ruff format .`) and mypy on the
# package (pyproject.toml's [tool.mypy]).  Exit 0: both clean; 1: a
# tool found something (its findings above, then one line naming the tool); 2: a tool is missing.
# Extra arguments go to ruff (e.g. --fix for import order and unused imports).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "lint: $*" >&2; }

# ruff: the one installed for $PY (pinned in pyproject.toml's test extra), else the one on PATH
if "$PY" -m ruff --version >/dev/null 2>&1; then ruff=("$PY" -m ruff)
elif command -v ruff >/dev/null; then ruff=(ruff)
else say "ruff is not installed (pip install -e '.[test]')"; exit 2; fi
"$PY" -m mypy --version >/dev/null 2>&1 || { say "mypy is not installed for $PY (pip install -e '.[test]')"; exit 2; }

failed=()
"${ruff[@]}" check . "$@" || failed+=(ruff)
"${ruff[@]}" format --check . || { say "run: ruff format ."; failed+=("ruff format"); }

# mypy cannot follow setuptools' package-dir mapping (harness/ is powercut, vm-images/ is
# powercut.images, ...): link the directories into the tree pyproject.toml's mypy_path names, and
# print mypy's paths as the repository's.
tree=.mypy_cache/tree/powercut
rm -rf "$tree" && mkdir -p "$tree" || { say "cannot make $tree"; exit 2; }
here=$(pwd -P)
for e in harness/*; do
    n=${e#harness/}
    [ "$n" = __pycache__ ] || ln -s "$here/$e" "$tree/$n"
done
ln -s "$here/vm-images" "$tree/images"
ln -s "$here/workloads" "$tree/workloads"
ln -s "$here/checkers" "$tree/checkers"
"$PY" -m mypy 2>&1 | sed -e "s#^$tree/images/#vm-images/#" -e "s#^$tree/workloads/#workloads/#" \
    -e "s#^$tree/checkers/#checkers/#" -e "s#^$tree/#harness/#"
[ "${PIPESTATUS[0]}" = 0 ] || failed+=(mypy)

if [ ${#failed[@]} -gt 0 ]; then
    say "FAILED: ${failed[*]}"
    exit 1
fi
say "ruff, ruff format and mypy: clean"
