#!/usr/bin/env bash
# The long chaos schedule of issue 13: a real 3-MetaServer, 3-broker cluster (release build)
# through >= 100 partition-leader kills, 30 zombie pauses (5-30 s), 30 network cuts and 10
# MetaServer leader kills, then the checker. Prints the summary (paste it in the closing note)
# and exits non-zero if the checker found a violation; the run directory is kept then.
#
# Usage: scripts/chaos-long.sh [extra tinymq-chaos flags, e.g. --seed 42 or --dir /tmp/run]
# Takes about two hours on a 2-core machine. Replay a failing run with the seed it printed.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p tinymq-cli -p tinymq-chaos >&2
ulimit -n 65536 2>/dev/null || true

exec target/release/tinymq-chaos \
  --tinymq target/release/tinymq \
  --faults 170 --kinds leader-kill:100,zombie:30,cut:30,meta-kill:10 \
  --partitions 6 --producers 3 --rate 300 \
  --down-min-ms 1000 --down-max-ms 8000 \
  --zombie-min-ms 500 --zombie-max-ms 30000 \
  --cut-min-ms 500 --cut-max-ms 20000 \
  --gap-min-ms 1000 --gap-max-ms 3000 \
  "$@"
