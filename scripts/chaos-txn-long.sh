#!/usr/bin/env bash
# The long transactional chaos schedule of issue 29: a real 3-MetaServer, 3-broker cluster
# (release build), three transactional producers (timeout 5 s, 1-10 records a transaction, 20%
# aborted) through partition-leader kills, transaction-coordinator kills, producer kills
# mid-transaction (left to the coordinator's timer), zombie pauses, network cuts and
# MetaServer leader kills, then the transactional checker. Prints the summary and exits
# non-zero if the checker found a violation; the run directory is kept then.
#
# Usage: scripts/chaos-txn-long.sh [extra tinymq-chaos flags, e.g. --seed 42, --faults 300]
# About 10-12 minutes on a 2-core machine with the default 60 faults. Set TINYMQ_CHAOS_BIN_DIR
# to a directory holding already built tinymq and tinymq-chaos binaries to skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${TINYMQ_CHAOS_BIN_DIR:-}" ]]; then
  cargo build --release -p tinymq-cli -p tinymq-chaos >&2
  TINYMQ_CHAOS_BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
fi
ulimit -n 65536 2>/dev/null || true

exec "$TINYMQ_CHAOS_BIN_DIR/tinymq-chaos" \
  --tinymq "$TINYMQ_CHAOS_BIN_DIR/tinymq" \
  --workload txn --producers 3 --partitions 6 \
  --transaction-timeout-ms 5000 --abandon-slack-ms 5000 --abort-percent 20 --txn-records-max 10 \
  --faults 60 --kinds leader-kill:20,coordinator-kill:15,producer-kill:10,zombie:5,cut:5,meta-kill:5 \
  --down-min-ms 1000 --down-max-ms 8000 \
  --zombie-min-ms 5000 --zombie-max-ms 30000 \
  --cut-min-ms 5000 --cut-max-ms 20000 \
  --gap-min-ms 1000 --gap-max-ms 3000 \
  "$@"
