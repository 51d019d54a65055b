#!/usr/bin/env bash
# The cost of transactions (issue 29): idempotent produce beside transactional produce at 1,
# 10 and 100 records per transaction, and read_uncommitted beside read_committed consume, in
# one sitting on this machine:
#   - tinymq's Kafka listener and Apache Kafka (scripts/install-apache-kafka.sh, one KRaft
#     node on loopback) with the same client, the Java client's Perf (tests/kafka-java);
#   - tinymq's native client (`tinymq bench`) at the same settings against tinymq.
# Each produce scenario runs against a fresh server (tinymq: a fresh data dir; Kafka: a fresh
# log dir); the two consume runs read the topic the 100-records-per-transaction run just
# wrote on that server (COUNT records in transactions, plus their commit markers), first
# read_uncommitted, then read_committed. Producers: one, acks=all, linger 5 ms, 1 MiB
# batches, no compression, no keys; the transactional runs commit each transaction before
# beginning the next. The Java runs include the JVM warming up.
#
# Flush: FLUSH=os compares tinymq topics with flush `os` (no fsync before an ack) with
# Kafka's default (none either); FLUSH=always compares tinymq's `always` (fsync before an
# ack) with Kafka's log.flush.interval.messages=1. Whatever FLUSH, tinymq's
# __transaction_state and its commit markers are always fsynced (docs/transactions.md),
# while Kafka fsyncs its transaction log only under log.flush.interval.messages=1.
#
# Usage: scripts/bench-txn.sh [FLUSH] [COUNT] [TXNS] [PARTITIONS] [MESSAGE_BYTES]
#   defaults: os 200000 1000 3 1024. COUNT records for idempotent produce, for 100 records
#   per transaction and for each consume run; TXNS transactions at 1 and at 10 records per
#   transaction (TXNS and 10 × TXNS records).
#   TINYMQ_BENCH_BIN=path/to/tinymq skips the release build (a debug binary is a quick check
#   of the script, not a measurement). KAFKA_PORT (39092) and KAFKA_CONTROLLER_PORT (39093)
#   are Apache Kafka's ports.
# Prints a Markdown table, then the machine's limits (disk with dd conv=fdatasync, loopback
# with iperf3 when installed) and the load averages before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
flush=${1:-os}
count=${2:-200000}
txns=${3:-1000}
partitions=${4:-3}
message_bytes=${5:-1024}
case "$flush" in
  os) kafka_flush=() ;;
  always) kafka_flush=(log.flush.interval.messages=1) ;;
  *) echo "FLUSH: os or always" >&2; exit 2 ;;
esac

T=${TINYMQ_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/tinymq}
[ -n "${TINYMQ_BENCH_BIN:-}" ] || cargo build --release -p tinymq-cli >&2
scripts/install-kafka-tools.sh >&2
scripts/install-apache-kafka.sh >&2
DATA=${TINYMQ_BENCH_DIR:-target/bench-txn-data}
mkdir -p "$(dirname "$DATA")"
KPORT=${KAFKA_PORT:-39092}
KCPORT=${KAFKA_CONTROLLER_PORT:-39093}
java_perf=(java -cp "tests/kafka-java/target/kafka-java.jar:tests/kafka-java/target/lib/*"
  tinymq.kafkajava.Main)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
PID=

start_tinymq() {
  rm -rf "$DATA" "$DATA.out"
  TINYMQ_LOG=warn "$T" server --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --http off \
    --data "$DATA" >"$DATA.out" &
  PID=$!
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^tinymq listening on //p' "$DATA.out" 2>/dev/null || true)
    KAFKA=$(sed -n 's/^tinymq kafka listening on //p' "$DATA.out" 2>/dev/null || true)
    [ -n "$ADDR" ] && [ -n "$KAFKA" ] && return
    sleep 0.1
  done
  echo "tinymq did not start" >&2; exit 1
}

start_kafka() {
  scripts/install-apache-kafka.sh run "$DATA-kafka" "$KPORT" "$KCPORT" "${kafka_flush[@]}" \
    >"$DATA-kafka.out" 2>&1 &
  PID=$!
  KAFKA=127.0.0.1:$KPORT
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$KPORT") 2>/dev/null && return
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
  done
  cat "$DATA-kafka.out" >&2
  echo "Apache Kafka did not start" >&2; exit 1
}

stop_server() {
  kill -TERM "$PID"
  wait "$PID" || true
  PID=
}
trap '[ -z "$PID" ] || kill -TERM "$PID" 2>/dev/null || true' EXIT

# The topic, PARTITIONS partitions: on tinymq with the FLUSH policy (tinymq's CLI), on Kafka
# through the Java Admin client (the broker's flush settings apply).
create_topic() {
  case "$1" in
    tinymq) "$T" topic create "$2" --partitions "$partitions" --flush "$flush" \
      --bootstrap "$ADDR" >/dev/null ;;
    kafka)
      for _ in $(seq 20); do
        "${java_perf[@]}" create-topic "$KAFKA" "$2" "$partitions" >/dev/null 2>&1 && return
        sleep 1
      done
      echo "could not create $2 on Apache Kafka" >&2; exit 1 ;;
  esac
}

# One table row from a JSON report of tinymq bench or of the Java Perf (the Java
# transactional report's `latency` is per transaction and `record_latency` per record;
# tinymq bench's `latency` is per record and `txn_latency` per transaction).
row() {
  python3 - "$@" <<'PY'
import json, sys
server, client, scenario, r = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if "error" in r:
    sys.exit(f"{server} {client} {scenario}: {r['error']}")
java_txn = r.get("client") == "java" and "records_per_txn" in r
rec = (r.get("record_latency") if java_txn else r.get("latency")) or {}
txn = (r.get("latency") if java_txn else r.get("txn_latency")) or {}
ms = lambda l, k: f"{l[k] / 1000:,.1f}" if k in l else "–"
tps = f"{r['txn_per_s']:,.0f}" if r.get("txn_per_s") else "–"
print(f"| {server} | {client} | {scenario} | {r['messages']:,} | {r['msg_per_s']:,.0f} | "
      f"{r['mb_per_s']:,.1f} | {tps} | {ms(rec, 'p50_us')} / {ms(rec, 'p99_us')} | "
      f"{ms(txn, 'p50_us')} / {ms(txn, 'p99_us')} / {ms(txn, 'max_us')} |")
PY
}

echo "| server | client | scenario | records | records/s | MB/s | txn/s | record latency p50 / p99 ms | txn latency p50 / p99 / max ms |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"

# Java client runs against the server kind $1 (tinymq's Kafka listener or Apache Kafka).
java_runs() {
  local kind=$1 name=$2
  "start_$kind"
  create_topic "$kind" pidem
  row "$name" java "idempotent" \
    "$("${java_perf[@]}" perf-produce "$KAFKA" pidem "$count" "$message_bytes")"
  stop_server
  local per n
  for per in 1 10 100; do
    n=$((per == 100 ? count : txns * per))
    "start_$kind"
    create_topic "$kind" ptxn
    row "$name" java "txn, $per/txn" \
      "$("${java_perf[@]}" perf-txn-produce "$KAFKA" ptxn "$n" "$message_bytes" "$per")"
    [ "$per" = 100 ] || stop_server
  done
  local isolation
  for isolation in read_uncommitted read_committed; do
    row "$name" java "consume $isolation" \
      "$("${java_perf[@]}" perf-consume "$KAFKA" ptxn "$count" "$message_bytes" "$isolation")"
  done
  stop_server
}

java_runs tinymq "tinymq (Kafka listener)"
java_runs kafka "Apache Kafka $(scripts/install-apache-kafka.sh version)"

bench_args=(--message-bytes "$message_bytes" --partitions "$partitions" --flush "$flush" --json)
start_tinymq
row tinymq native "idempotent" \
  "$("$T" bench produce "${bench_args[@]}" --count "$count" --bootstrap "$ADDR")"
stop_server
for per in 1 10 100; do
  n=$((per == 100 ? count : txns * per))
  start_tinymq
  row tinymq native "txn, $per/txn" \
    "$("$T" bench produce "${bench_args[@]}" --count "$n" --transactional \
      --records-per-txn "$per" --topic ntxn --keep-topic --bootstrap "$ADDR")"
  [ "$per" = 100 ] || stop_server
done
for isolation in read-uncommitted read-committed; do
  row tinymq native "consume $isolation" \
    "$("$T" bench consume "${bench_args[@]}" --count "$count" --topic ntxn --keep-topic \
      --isolation "$isolation" --bootstrap "$ADDR")"
done
stop_server

disk=$(dd if=/dev/zero of="$DATA.dd" bs=1M count=256 conv=fdatasync 2>&1 | tail -1)
rm -f "$DATA.dd"
if command -v iperf3 >/dev/null 2>&1; then
  iperf3 -s -1 -p 39201 >/dev/null 2>&1 &
  sleep 0.5
  loopback=$(iperf3 -c 127.0.0.1 -p 39201 -t 3 -f g 2>&1 | awk '/receiver/ { print $7, $8 }')
else
  loopback="not measured (iperf3 not installed)"
fi
rm -rf "$DATA" "$DATA.out" "$DATA-kafka" "$DATA-kafka.out"

echo
echo "Flush: $flush (tinymq topics --flush $flush; Apache Kafka ${kafka_flush[*]:-with its defaults, no fsync}). $(nproc) cores," \
  "$(awk '/MemTotal/ { printf "%.0f GiB", $2/1048576 }' /proc/meminfo) RAM; Java client" \
  "kafka-clients $(sed -n 's:.*<version>\(4\.[0-9.]*\)</version>.*:\1:p' tests/kafka-java/pom.xml | head -1)," \
  "$(java -version 2>&1 | head -1)."
echo "Disk (dd bs=1M count=256 conv=fdatasync): $disk. Loopback (iperf3, 3 s): $loopback."
echo "Load average before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)."
