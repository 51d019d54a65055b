#!/usr/bin/env bash
# Installs the Python tools some tests run, in a virtual environment at .tools/venv (ignored by
# git): schemathesis (checks the REST API against its OpenAPI document,
# crates/cli/tests/rest_schemathesis.rs) and prometheus_client (parses /metrics,
# crates/cli/tests/metrics_scrape.rs). Pinned versions; idempotent, and quick when the venv
# already has them.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.tools/venv"
pins=(
  "schemathesis==4.32.5"
  "prometheus_client==0.26.0"
)

have_pins() {
  [ -x "$venv/bin/python" ] || return 1
  local installed
  installed="$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null)" || return 1
  local pin
  for pin in "${pins[@]}"; do
    # pip freeze spells names with '-' or '_' as the package does; compare case- and
    # separator-blind.
    local want
    want="$(printf '%s' "$pin" | tr 'A-Z_' 'a-z-')"
    printf '%s\n' "$installed" | tr 'A-Z_' 'a-z-' | grep -qx -- "$want" || return 1
  done
}

# The newest CPython 3.13+ on the machine when there is one (pyenv's or Debian's): CPython
# 3.11 raises "AST constructor recursion depth mismatch" now and then from hypothesis's
# lambda descriptions, which fails a schemathesis run for no fault of the API.
choose_python() {
  local c
  for c in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[3-9]*/bin/python3 2>/dev/null | sort -V -r) \
           $(ls /usr/bin/python3.1[3-9] 2>/dev/null | sort -V -r); do
    if "$c" -c 'import venv, ensurepip' 2>/dev/null; then
      echo "$c"
      return
    fi
  done
  echo python3
}
python="$(choose_python)"
want_version="$("$python" -c 'import sys; print(sys.version.split()[0])')"

# A venv made by another interpreter is made again.
if [ -x "$venv/bin/python" ] &&
   [ "$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)" != "$want_version" ]; then
  rm -rf "$venv"
fi

if have_pins; then
  echo "python tools already installed in $venv"
  exit 0
fi

if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  # Debian splits the venv module out of python3.
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq python3-venv
  fi
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "python3 with the venv module is needed (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
mkdir -p "$root/.tools"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet "${pins[@]}"
have_pins || { echo "the pinned python tools did not install into $venv" >&2; exit 1; }
echo "python tools installed in $venv (Python $want_version)"
