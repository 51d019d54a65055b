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

if have_pins; then
  echo "python tools already installed in $venv"
  exit 0
fi

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "python3 with the venv module is needed (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
mkdir -p "$root/.tools"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet "${pins[@]}"
have_pins || { echo "the pinned python tools did not install into $venv" >&2; exit 1; }
echo "python tools installed in $venv"
