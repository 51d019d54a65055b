#!/usr/bin/env bash
# Installs what the web console's browser test needs, and nothing when it is already there:
#   - Debian's `chromium` (apt-get) when /usr/bin/chromium is missing;
#   - web/node_modules from web/package-lock.json (`npm ci`) when missing or installed from
#     another lockfile.
# playwright-core drives that system Chromium; no browser is ever downloaded.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ ! -x /usr/bin/chromium ]]; then
    echo "install-browser-tools: installing Debian's chromium"
    sudo=""
    if [[ "$(id -u)" != 0 ]]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium
fi

if ! command -v npm >/dev/null; then
    echo "install-browser-tools: npm is missing (install Debian's nodejs and npm, Node 20 or later)" >&2
    exit 1
fi

web="$root/web"
stamp="$web/node_modules/.tinymq-lock-sha256"
want="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
# Stale when installed from another lockfile (a checkout may change it, or only touch it).
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "install-browser-tools: npm ci in web/"
    (cd "$web" && npm ci --ignore-scripts --no-audit --no-fund)
    echo "$want" > "$stamp"
fi

echo "install-browser-tools: chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), web/node_modules ready"
