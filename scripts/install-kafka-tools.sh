#!/usr/bin/env bash
# Installs the real Kafka clients that crates/cli/tests/kafka_clients_*.rs drive against
# `tinymq server --kafka-listen` (issue 17):
# - kcat, from Debian (librdkafka's command-line client);
# - confluent-kafka (librdkafka inside its wheel) and kafka-python, pinned, into the venv
#   .tools/venv that scripts/install-python-tools.sh makes (made first when missing);
# - the Java client: tests/kafka-java, a small Maven program on org.apache.kafka:kafka-clients
#   (and kafka-streams, for an exactly_once_v2 application),
#   built into tests/kafka-java/target/kafka-java.jar with its dependencies in target/lib
#   (run as `java -cp 'target/kafka-java.jar:target/lib/*' tinymq.kafkajava.Main`); a JDK and
#   Maven come from Debian when missing.
# - Apache Kafka's released server and tools (scripts/install-apache-kafka.sh, into
#   .tools/apache-kafka/libs), whose command-line tools (kafka-topics, kafka-configs, …)
#   crates/cli/tests/kafka_tools.rs runs against tinymq.
# Idempotent, and quick when everything is already there: the jar is rebuilt only when the
# program's sources or pom change (a stamp of their hash), offline first from ~/.m2.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.tools/venv"
python_pins=(
  "confluent-kafka==2.16.1"
  "kafka-python==3.0.12"
)
java_dir="$root/tests/kafka-java"

# Installs Debian packages; a fresh machine may have no package lists yet, so the lists are
# updated only when the install fails.
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "needed: $* (Debian: apt-get install $*), and this is not root on Debian" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; }
}

install_kcat() {
  if command -v kcat >/dev/null 2>&1; then
    echo "kcat already installed: $(command -v kcat)"
    return
  fi
  apt_install kcat
  command -v kcat >/dev/null 2>&1 || { echo "kcat did not install" >&2; exit 1; }
  echo "kcat installed: $(command -v kcat)"
}

have_python_pins() {
  [ -x "$venv/bin/python" ] || return 1
  local installed pin want
  installed="$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null)" || return 1
  for pin in "${python_pins[@]}"; do
    # pip freeze spells names with '-' or '_' as the package does; compare separator-blind.
    want="$(printf '%s' "$pin" | tr 'A-Z_' 'a-z-')"
    printf '%s\n' "$installed" | tr 'A-Z_' 'a-z-' | grep -qx -- "$want" || return 1
  done
}

install_python_clients() {
  # The venv (and the interpreter it is made with) belong to install-python-tools.sh; it
  # also remakes a venv of the wrong interpreter, which would drop our packages, so it runs
  # first every time (it is quick when done).
  "$root/scripts/install-python-tools.sh" >/dev/null
  if have_python_pins; then
    echo "python Kafka clients already installed in $venv"
    return
  fi
  "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "${python_pins[@]}"
  have_python_pins || { echo "the pinned Kafka clients did not install into $venv" >&2; exit 1; }
  "$venv/bin/python" -c 'import confluent_kafka, kafka' ||
    { echo "confluent_kafka or kafka does not import in $venv" >&2; exit 1; }
  echo "python Kafka clients installed in $venv"
}

install_java_client() {
  if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    apt_install default-jdk-headless maven
  fi
  local stamp="$java_dir/target/sources.sha256" want
  want="$(cd "$java_dir" && find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)"
  if [ -f "$java_dir/target/kafka-java.jar" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "Java Kafka client program already built: $java_dir/target/kafka-java.jar"
    return
  fi
  local goals=(-q -B -Dstyle.color=never package dependency:copy-dependencies
    -DoutputDirectory=target/lib -DincludeScope=runtime)
  # Offline first: a machine that built it once has everything in ~/.m2.
  (cd "$java_dir" && { mvn -o "${goals[@]}" >/dev/null 2>&1 || mvn "${goals[@]}" 2>&1 | sed "s/\x1b\[[0-9;]*m//g"; })
  [ -f "$java_dir/target/kafka-java.jar" ] || { echo "the Java program did not build" >&2; exit 1; }
  printf '%s\n' "$want" >"$stamp"
  echo "Java Kafka client program built: $java_dir/target/kafka-java.jar"
}

install_kcat
install_python_clients
install_java_client
# Apache Kafka's released jars, whose command-line tools crates/cli/tests/kafka_tools.rs runs.
"$root/scripts/install-apache-kafka.sh" install
