#!/usr/bin/env bash
# Throughput through the Kafka listener (the Java client, tests/kafka-java's Perf) beside the
# same load on the native protocol (`tinymq bench`), in one sitting, each run against a fresh
# release server: same value size, count and partitions, no keys, acks=all, linger 5 ms,
# 1 MiB batches, no compression, flush policy `os`. The Java consumer uses the client's fetch
# defaults (fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB, max.poll.records 500).
# The Java runs include the JVM warming up (a smaller share the larger COUNT is). Prints a
# Markdown table for BENCHMARKS.md.
#
# Usage: scripts/bench-kafka.sh [COUNT] [MESSAGE_BYTES] [PARTITIONS]
#   defaults: 500000 1024 1 (consume runs read the same COUNT, filled first natively)
#   TINYMQ_BENCH_BIN=target/debug/tinymq skips the release build (a quick check of the script,
#   not a measurement).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-500000}
message_bytes=${2:-1024}
partitions=${3:-1}

T=${TINYMQ_BENCH_BIN:-target/release/tinymq}
[ -n "${TINYMQ_BENCH_BIN:-}" ] || cargo build --release -p tinymq-cli >&2
scripts/install-kafka-tools.sh >&2
DATA=${TINYMQ_BENCH_DIR:-target/bench-kafka-data}
java_perf=(java -cp "tests/kafka-java/target/kafka-java.jar:tests/kafka-java/target/lib/*"
  tinymq.kafkajava.Main)

start_server() {
  rm -rf "$DATA" "$DATA.out"
  mkdir -p "$(dirname "$DATA")"
  TINYMQ_LOG=warn "$T" server --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --http off \
    --data "$DATA" > "$DATA.out" &
  PID=$!
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^tinymq listening on //p' "$DATA.out" 2>/dev/null || true)
    KAFKA=$(sed -n 's/^tinymq kafka listening on //p' "$DATA.out" 2>/dev/null || true)
    [ -n "$ADDR" ] && [ -n "$KAFKA" ] && return
    sleep 0.1
  done
  echo "server did not start" >&2; exit 1
}
stop_server() { kill -TERM "$PID"; wait "$PID" || true; }

# A topic like the one `tinymq bench` creates: PARTITIONS partitions, flush os.
create_topic() {
  "$T" topic create "$1" --partitions "$partitions" --flush os --bootstrap "$ADDR" >/dev/null
}

row() {
  python3 - "$1" "$2" <<'PY'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
l = r.get("latency") or {}
g = lambda k: str(l.get(k, "–"))
print(f"| {name} | {r['msg_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {g('p50_us')} | {g('p99_us')} | {g('p999_us')} | {g('max_us')} |")
PY
}

shape="$message_bytes B x $count, $partitions partition(s)"
echo "| scenario ($shape) | msg/s | MB/s | p50 µs | p99 µs | p99.9 µs | max µs |"
echo "|---|---:|---:|---:|---:|---:|---:|"

bench_args=(--message-bytes "$message_bytes" --count "$count" --partitions "$partitions"
  --flush os --json)

start_server
row "produce, native (tinymq bench)" "$("$T" bench produce "${bench_args[@]}" --bootstrap "$ADDR")"
stop_server

start_server
create_topic kbench
row "produce, Kafka listener (Java client)" \
  "$("${java_perf[@]}" perf-produce "$KAFKA" kbench "$count" "$message_bytes")"
stop_server

start_server
row "consume, native (tinymq bench)" "$("$T" bench consume "${bench_args[@]}" --bootstrap "$ADDR")"
stop_server

start_server
create_topic kbench
"$T" bench produce "${bench_args[@]}" --topic kbench --keep-topic --bootstrap "$ADDR" >/dev/null
row "consume, Kafka listener (Java client)" \
  "$("${java_perf[@]}" perf-consume "$KAFKA" kbench "$count" "$message_bytes")"
stop_server
rm -rf "$DATA" "$DATA.out"

echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2/1048576 }' /proc/meminfo) RAM;" \
  "Java client org.apache.kafka:kafka-clients $(sed -n 's:.*<version>\(4\.[0-9.]*\)</version>.*:\1:p' tests/kafka-java/pom.xml | head -1)"
