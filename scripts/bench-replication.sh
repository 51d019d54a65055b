#!/usr/bin/env bash
# Replication benchmarks of BENCHMARKS.md: one MetaServer and three brokers (release build) on
# this machine; produce 1 KB with RF 1 and RF 3 (acks=all) under flush always and os, end to
# end at a fixed 10k msg/s with RF 3, and failover: the max latency of a fixed-rate producer
# while the partition's leader is killed (SIGKILL) or stopped (SIGTERM, controlled shutdown).
# Prints a Markdown table. Usage: scripts/bench-replication.sh [scenario-filter]
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-}

cargo build --release -p tinymq-cli >&2
T=target/release/tinymq
DATA=${TINYMQ_BENCH_DIR:-target/bench-repl}
BASE=${TINYMQ_BENCH_PORT:-23500}
META=127.0.0.1:$BASE
BOOT=127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 3))
declare -A PIDS

start_broker() {
  local id=$1
  TINYMQ_LOG=warn "$T" broker --id "$id" --listen "127.0.0.1:$((BASE + id))" --meta "$META" \
    --data "$DATA/b$id" --replica-lag-time-max-ms 10000 >> "$DATA/b$id.out" 2>> "$DATA/b$id.err" &
  PIDS[$id]=$!
}
start_cluster() {
  stop_cluster
  rm -rf "$DATA"; mkdir -p "$DATA"
  TINYMQ_LOG=warn "$T" meta --id 1 --listen "$META" --peers "1=$META" --data "$DATA/meta" \
    > "$DATA/meta.out" 2> "$DATA/meta.err" &
  PIDS[meta]=$!
  for id in 1 2 3; do start_broker "$id"; done
  for _ in $(seq 100); do
    "$T" cluster status --json --bootstrap "$BOOT" 2>/dev/null \
      | python3 -c 'import json,sys; v=json.load(sys.stdin); sys.exit(0 if sum(1 for b in v.get("brokers",[]) if b.get("live")) >= 3 else 1)' \
      2>/dev/null && return
    sleep 0.2
  done
  echo "cluster did not start" >&2; exit 1
}
stop_cluster() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  PIDS=()
  wait 2>/dev/null || true
}
trap stop_cluster EXIT

# create TOPIC RF FLUSH: the topic, then waits until its ISR is full.
create() {
  "$T" topic create "$1" --partitions 1 --replicas "$2" --flush "$3" --bootstrap "$BOOT" > /dev/null
  for _ in $(seq 100); do
    "$T" topic describe "$1" --json --bootstrap "$BOOT" \
      | python3 -c "import json,sys; v=json.load(sys.stdin); sys.exit(0 if all(len(p['isr'])==$2 and p.get('leader') for p in v['partitions']) else 1)" \
      2>/dev/null && return
    sleep 0.2
  done
  echo "ISR of $1 not full" >&2; exit 1
}
leader_of() {
  "$T" topic describe "$1" --json --bootstrap "$BOOT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["partitions"][0]["leader"])'
}

echo "| scenario | msg/s | MB/s | p50 µs | p99 µs | p99.9 µs | max µs |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row() {
  python3 - "$1" "$2" <<'PY'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
l = r.get("latency") or {}
g = lambda k: str(l.get(k, "–"))
print(f"| {name} | {r['msg_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {g('p50_us')} | {g('p99_us')} | {g('p999_us')} | {g('max_us')} |")
PY
}
# run NAME RF FLUSH [FAULT] -- BENCH ARGS: a fresh cluster and topic per scenario.
run() {
  local name=$1 rf=$2 flush=$3 fault=$4; shift 5
  if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
  start_cluster
  create t "$rf" "$flush"
  local out="$DATA/bench.json"
  "$T" bench "$@" --topic t --keep-topic --bootstrap "$BOOT" --json > "$out" &
  local bench=$!
  if [ "$fault" != none ]; then
    sleep 5
    local leader; leader=$(leader_of t)
    if [ "$fault" = kill ]; then kill -9 "${PIDS[$leader]}"; else kill -TERM "${PIDS[$leader]}"; fi
  fi
  wait "$bench"
  row "$name" "$(cat "$out")"
  stop_cluster
}

run "produce 1 KB, RF 1, always, acks=all" 1 always none -- produce --message-bytes 1024 --count 300000
run "produce 1 KB, RF 3, always, acks=all" 3 always none -- produce --message-bytes 1024 --count 300000
run "produce 1 KB, RF 1, os, acks=all"     1 os none -- produce --message-bytes 1024 --count 300000
run "produce 1 KB, RF 3, os, acks=all"     3 os none -- produce --message-bytes 1024 --count 300000
run "produce 1 KB, RF 3, os, acks=1"       3 os none -- produce --message-bytes 1024 --count 300000 --acks 1
run "e2e 1 KB at 10k msg/s, RF 3, always, linger 0" 3 always none -- e2e --message-bytes 1024 --count 100000 --rate 10000 --linger-ms 0
run "e2e 1 KB at 10k msg/s, RF 1, always, linger 0" 1 always none -- e2e --message-bytes 1024 --count 100000 --rate 10000 --linger-ms 0
run "failover: SIGKILL of the leader, 1k msg/s, RF 3" 3 always kill -- produce --message-bytes 1024 --duration 30 --rate 1000 --linger-ms 0
run "failover: SIGTERM of the leader, 1k msg/s, RF 3" 3 always term -- produce --message-bytes 1024 --duration 30 --rate 1000 --linger-ms 0

echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2/1048576 }' /proc/meminfo) RAM; one MetaServer and three brokers share it"
dd if=/dev/zero of="$DATA/dd" bs=1M count=512 conv=fdatasync 2>&1 | tail -1 | sed 's/^/disk (dd conv=fdatasync): /'
rm -f "$DATA/dd"
