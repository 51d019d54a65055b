#!/usr/bin/env bash
# The README's test command: installs the tools some tests drive (a Python venv with
# schemathesis and prometheus_client; Debian's Chromium and the console's npm packages; the
# Kafka clients: kcat, confluent-kafka, kafka-python and the Java client), then
# runs every test of the workspace: scripts/run-tests.py builds them with `cargo test --no-run`
# and runs the test binaries several at a time (TINYMQ_TEST_JOBS, default cores + 1). Each
# installer is idempotent and quick once done, so this is also the command to run again after
# a pull. Arguments go to `cargo test --no-run` (e.g. `-p tinymq-broker`), and those after
# `--` to every test binary (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

for installer in scripts/install-python-tools.sh scripts/install-browser-tools.sh scripts/install-kafka-tools.sh; do
  if [ -x "$installer" ]; then
    echo "== $installer"
    "$installer"
  fi
done

exec scripts/run-tests.py --workspace "$@"
