#!/usr/bin/env bash
# Runs the scenarios of BENCHMARKS.md: each against a fresh release server (so its peak RSS
# belongs to that scenario), then measures the machine's own limits in the same sitting.
# Prints a Markdown table. Usage: scripts/bench.sh [scenario-filter]
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-}

cargo build --release -p tinymq-cli >&2
T=target/release/tinymq
DATA=${TINYMQ_BENCH_DIR:-target/bench-data}
ulimit -n 65536 2>/dev/null || true

start_server() {
  rm -rf "$DATA" "$DATA.out"
  mkdir -p "$(dirname "$DATA")"
  TINYMQ_LOG=warn "$T" server --listen 127.0.0.1:0 --data "$DATA" --connections-max 20000 > "$DATA.out" &
  PID=$!
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^tinymq listening on //p' "$DATA.out" 2>/dev/null || true)
    [ -n "$ADDR" ] && return
    sleep 0.1
  done
  echo "server did not start" >&2; exit 1
}
stop_server() { kill -TERM "$PID"; wait "$PID" || true; }
rss_kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }

echo "| scenario | msg/s | MB/s | p50 µs | p99 µs | p99.9 µs | max µs | server peak RSS |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
run() {
  local name=$1; shift
  if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
  start_server
  local json
  json=$("$T" bench "$@" --bootstrap "$ADDR" --json)
  local hwm; hwm=$(rss_kib "$PID" VmHWM)
  stop_server
  python3 - "$name" "$json" "$hwm" <<'PY'
import json, sys
name, r, hwm = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
l = r.get("latency") or {}
g = lambda k: str(l.get(k, "–"))
print(f"| {name} | {r['msg_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {g('p50_us')} | {g('p99_us')} | {g('p999_us')} | {g('max_us')} | {hwm/1024:.0f} MiB |")
PY
}

run "produce 1 KB, os, 1 producer, 1 partition"       produce --message-bytes 1024 --count 500000 --flush os
run "produce 1 KB, os, 4 producers, 4 partitions"     produce --message-bytes 1024 --count 500000 --flush os --producers 4 --partitions 4
run "produce 1 KB, always, 1 producer, 1 partition"   produce --message-bytes 1024 --count 500000 --flush always
run "produce 1 KB, always, 4 producers, 4 partitions" produce --message-bytes 1024 --count 500000 --flush always --producers 4 --partitions 4
run "produce 100 B, os, 1 producer, 1 partition"      produce --message-bytes 100 --count 3000000 --flush os
run "produce 100 B, os, 4 producers, 4 partitions"    produce --message-bytes 100 --count 3000000 --flush os --producers 4 --partitions 4
run "produce 100 B, os, batch API (latency per 1,000-message batch)" produce --message-bytes 100 --count 3000000 --flush os --api batch --batch-records 1000
run "produce 1 KB, os, batch API (latency per 1,000-message batch)"  produce --message-bytes 1024 --count 500000 --flush os --api batch --batch-records 1000
run "1 message per request, one in flight, 1 KB, os"  produce --message-bytes 1024 --count 20000 --flush os --api batch --batch-records 1 --in-flight 1
run "closed loop, one 1,000-message batch in flight, 1 KB, os (latency per batch)" produce --message-bytes 1024 --count 500000 --flush os --api batch --batch-records 1000 --in-flight 1
run "consume 1 KB, 1 consumer, 1 partition"           consume --message-bytes 1024 --count 1000000 --flush os
run "consume 100 B, 1 consumer, 1 partition"          consume --message-bytes 100 --count 5000000 --flush os
run "e2e 1 KB at 10k msg/s, os, linger 0"             e2e --message-bytes 1024 --count 100000 --rate 10000 --flush os --linger-ms 0
run "e2e 1 KB at 10k msg/s, always, linger 0"         e2e --message-bytes 1024 --count 100000 --rate 10000 --flush always --linger-ms 0
run "e2e 1 KB at max rate, os"                        e2e --message-bytes 1024 --count 500000 --flush os

if [ -z "$filter" ] || [[ "idle" == *"$filter"* ]]; then
  start_server
  sleep 0.5
  idle=$(rss_kib "$PID" VmRSS)
  "$T" bench idle-connections --count 10000 --hold-s 3 --bootstrap "$ADDR" > /dev/null &
  holder=$!
  sleep 2.5
  with=$(rss_kib "$PID" VmRSS)
  wait "$holder"
  stop_server
  echo
  echo "Server RSS idle: $((idle / 1024)) MiB; with 10,000 idle connections: $((with / 1024)) MiB;" \
       "per connection: $(( (with - idle) * 1024 / 10000 )) bytes"
fi

echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2/1048576 }' /proc/meminfo) RAM"
if ! command -v iperf3 >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3) >/dev/null 2>&1 || true
fi
if command -v iperf3 >/dev/null; then
  iperf3 -s -1 -D >/dev/null 2>&1; sleep 0.3
  echo "Loopback (iperf3, 5 s): $(iperf3 -c 127.0.0.1 -t 5 -f g | awk '/receiver/ { print $7, $8 }')"
fi
dd_file="$DATA.dd"
echo "Disk (dd bs=1M count=1024 conv=fdatasync): $(dd if=/dev/zero of="$dd_file" bs=1M count=1024 conv=fdatasync 2>&1 | awk -F, 'END { print $NF }')"
echo "Disk (dd bs=1M count=1000 oflag=dsync, one fsync per MB): $(dd if=/dev/zero of="$dd_file" bs=1M count=1000 oflag=dsync 2>&1 | awk -F, 'END { print $NF }')"
rm -f "$dd_file"
rm -rf "$DATA" "$DATA.out"
