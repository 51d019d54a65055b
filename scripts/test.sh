#!/usr/bin/env bash
# The README's test command: installs the tools some tests drive (a Python venv with
# schemathesis and prometheus_client; Debian's Chromium and the console's npm packages; the
# Kafka clients: kcat, confluent-kafka, kafka-python and the Java client), then
# runs every test of the workspace. Each installer is idempotent and quick once done, so this
# is also the command to run again after a pull. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

for installer in scripts/install-python-tools.sh scripts/install-browser-tools.sh scripts/install-kafka-tools.sh; do
  if [ -x "$installer" ]; then
    echo "== $installer"
    "$installer"
  fi
done

echo "== cargo test --workspace $*"
exec cargo test --workspace "$@"
