#!/usr/bin/env bash
# Apache Kafka's released server, for benchmarks beside it on the same machine (issue 29,
# scripts/bench-txn.sh). Nothing of Kafka's is kept in this repository: its released jars are
# fetched from Maven Central at run time.
#
#   scripts/install-apache-kafka.sh
#       copies org.apache.kafka:kafka_2.13 (the version in tests/apache-kafka/pom.xml) and its
#       runtime dependencies into .tools/apache-kafka/libs (git ignores .tools) with Maven's
#       `dependency:copy-dependencies`; idempotent and quick when done (a stamp of the pom's
#       hash), offline first from ~/.m2. A JDK (17+) and Maven come from Debian when missing.
#   scripts/install-apache-kafka.sh run DIR PORT CONTROLLER_PORT [KEY=VALUE ...]
#       installs if needed, then formats a fresh single-node KRaft log dir in DIR (removed
#       first), writes DIR/server.properties for one combined broker+controller node on
#       loopback (PLAINTEXT on 127.0.0.1:PORT, the controller on 127.0.0.1:CONTROLLER_PORT,
#       every internal topic at replication factor 1) plus the KEY=VALUE lines given (e.g.
#       log.flush.interval.messages=1), and runs `kafka.Kafka DIR/server.properties` in the
#       foreground (exec: the caller backgrounds it and kills its pid). The server logs at
#       WARN to DIR/server.log. Kafka's flush default is kept unless given: no fsync before
#       an acknowledgement (the OS writes back).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom_dir="$root/tests/apache-kafka"
home="$root/.tools/apache-kafka"
libs="$home/libs"

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "needed: $* (Debian: apt-get install $*), and this is not root on Debian" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; }
}

install() {
  if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    apt_install default-jdk-headless maven
  fi
  local stamp="$home/pom.sha256" want
  want="$(sha256sum "$pom_dir/pom.xml" | cut -d' ' -f1)"
  if [ -f "$libs/kafka-clients-$(version).jar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "Apache Kafka $(version) already installed in $libs" >&2
    return
  fi
  rm -rf "$libs"
  mkdir -p "$libs"
  local goals=(-q -B -Dstyle.color=never dependency:copy-dependencies
    "-DoutputDirectory=$libs" -DincludeScope=runtime)
  (cd "$pom_dir" && { mvn -o "${goals[@]}" >/dev/null 2>&1 || mvn "${goals[@]}" 2>&1 | sed "s/\x1b\[[0-9;]*m//g"; })
  ls "$libs"/kafka_2.13-*.jar >/dev/null 2>&1 || { echo "Apache Kafka did not install" >&2; exit 1; }
  printf '%s\n' "$want" >"$stamp"
  echo "Apache Kafka $(version) installed in $libs" >&2
}

version() {
  sed -n '/<artifactId>kafka_2.13<\/artifactId>/{n;s:.*<version>\(.*\)</version>.*:\1:p}' "$pom_dir/pom.xml"
}

run() {
  [ $# -ge 3 ] || { echo "usage: $0 run DIR PORT CONTROLLER_PORT [KEY=VALUE ...]" >&2; exit 2; }
  local dir=$1 port=$2 cport=$3
  shift 3
  install
  rm -rf "$dir"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/logs
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  local kv
  for kv in "$@"; do printf '%s\n' "$kv" >>"$dir/server.properties"; done
  cat >"$dir/log4j2.properties" <<EOF
appender.file.type=File
appender.file.name=file
appender.file.fileName=$dir/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
EOF
  local java_opts=(-Xms1G -Xmx1G -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$dir/log4j2.properties"
    -cp "$libs/*")
  local cluster_id
  cluster_id="$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
  java "${java_opts[@]}" kafka.tools.StorageTool format -t "$cluster_id" \
    -c "$dir/server.properties" >"$dir/format.out" 2>&1 ||
    { cat "$dir/format.out" >&2; echo "formatting $dir failed" >&2; exit 1; }
  exec java "${java_opts[@]}" kafka.Kafka "$dir/server.properties"
}

case "${1:-install}" in
  install) install ;;
  run) shift; run "$@" ;;
  version) version ;;
  *) echo "usage: $0 [install | run DIR PORT CONTROLLER_PORT [KEY=VALUE ...] | version]" >&2; exit 2 ;;
esac
