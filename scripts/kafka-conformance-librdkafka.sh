#!/usr/bin/env bash
# Runs a subset of librdkafka's own test suite against a tinymq Kafka listener (issue 17's
# "librdkafka conformance"). The suite comes from Debian's source package librdkafka 2.0.2
# (`apt-get source`), is built once under .tools/librdkafka-2.0.2 (ignored by git; never
# committed) and its test-runner is pointed at the listener through the suite's test.conf.
#
# Usage:
#   scripts/kafka-conformance-librdkafka.sh HOST:PORT        run the allow-list
#   scripts/kafka-conformance-librdkafka.sh --all HOST:PORT  run every broker test (to choose
#                                                           the allow-list); never fails
#   scripts/kafka-conformance-librdkafka.sh --build-only     fetch and build, run nothing
# The allow-list is tests/kafka-conformance/librdkafka-allow.txt: one test number per line,
# '#' starts a comment saying why the test is in. Prints
# "librdkafka tests: P passed, F failed of N" and exits non-zero when an allow-listed test
# does not pass (a test the suite skips counts as not passing: it proved nothing).
# The server is expected to run as the suite's default scenario does: auto-created topics with
# 4 partitions (`tinymq server --kafka-listen ... --kafka-auto-create-topics --partitions 4`).
# Each test's output is kept in .tools/librdkafka-2.0.2/logs/NNNN.log.
# Idempotent: a warm run only runs the tests.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="2.0.2"
debian_version="2.0.2-1"
cache="$root/.tools/librdkafka-$version"
src="$cache/src"
allow_file="$root/tests/kafka-conformance/librdkafka-allow.txt"
# Only what the tests need: no TLS, SASL/GSSAPI or HTTP; lz4 and snappy are built in, zlib
# and zstd come from Debian so all four codecs tinymq accepts are exercised.
configure_args=(--no-download --disable-ssl --disable-gssapi --disable-curl --disable-lz4-ext
  --enable-zlib --enable-zstd --disable-syslog)
# A test that hangs is stopped after this long (the suite's own per-test timeouts are
# multiplied by test_timeout_multiplier first).
test_wall_seconds_max=300
test_timeout_multiplier=2
# The broker version the suite assumes (it skips tests needing a newer one): 2.8, whose
# protocol versions tinymq's ApiVersions covers.
kafka_version="${TEST_KAFKA_VERSION:-2.8.1}"

mode=allow
case "${1:-}" in
  --all) mode=all; shift ;;
  --build-only) mode=build; shift ;;
esac
bootstrap="${1:-${TINYMQ_KAFKA_ADDR:-}}"
if [ "$mode" != build ] && [ -z "$bootstrap" ]; then
  echo "usage: $0 [--all] HOST:PORT | --build-only (or set TINYMQ_KAFKA_ADDR)" >&2
  exit 2
fi

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# apt-get source needs a deb-src entry; Debian images ship only binary ones.
ensure_deb_src() {
  if grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return
  fi
  echo "adding a deb-src entry: /etc/apt/sources.list.d/tinymq-src.sources"
  as_root tee /etc/apt/sources.list.d/tinymq-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  as_root apt-get update -qq
}

ensure_build_tools() {
  local missing=() pkg
  for pkg in gcc g++ make pkg-config dpkg-dev zlib1g-dev libzstd-dev python3; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing build tools: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

fetch_source() {
  [ -f "$src/.unpacked" ] && return
  ensure_deb_src
  mkdir -p "$cache/download"
  if ! ls "$cache/download"/librdkafka_"$debian_version".dsc >/dev/null 2>&1; then
    # A deb-src entry whose index was never fetched finds nothing: update once and retry.
    (cd "$cache/download" && apt-get source --download-only "librdkafka=$debian_version") ||
      { as_root apt-get update -qq &&
        (cd "$cache/download" && apt-get source --download-only "librdkafka=$debian_version"); }
  fi
  rm -rf "$src"
  # Applies Debian's patches too (a Makefile bashism fix).
  dpkg-source -x "$cache/download/librdkafka_$debian_version.dsc" "$src" >/dev/null
  touch "$src/.unpacked"
}

build() {
  local stamp="$src/.built" want
  want="$(printf '%s\n' "${configure_args[@]}")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$src/tests/test-runner" ]; then
    return
  fi
  ensure_build_tools
  local started=$SECONDS
  echo "building librdkafka $version and its test-runner (make -j2) ..."
  (cd "$src" && ./configure "${configure_args[@]}" >"$cache/configure.log" 2>&1) ||
    { tail -30 "$cache/configure.log"; exit 1; }
  (cd "$src" && make -j2 libs >"$cache/build.log" 2>&1 && make -j2 -C tests test-runner >>"$cache/build.log" 2>&1) ||
    { tail -30 "$cache/build.log"; exit 1; }
  printf '%s' "$want" >"$stamp"
  echo "built in $((SECONDS - started)) s"
}

ensure_build_tools
fetch_source
build
[ "$mode" = build ] && exit 0

# Tests that need a broker, in suite order (--all runs these): the suite's table of tests
# without the local (mock-cluster/broker-less), manual, known-issue and socket-emulation ones.
broker_tests() {
  awk '/^struct test tests\[\] = \{/ { on = 1 } on { printf "%s ", $0 } on && /^\};/ { exit }' "$src/tests/test.c" |
    sed 's/_TEST(/\n/g' | grep -E '^[0-9]{4}_' | grep -vE 'TEST_F_(LOCAL|MANUAL|KNOWN_ISSUE|SOCKEM)' |
    cut -c1-4 | uniq
}
allow_listed() {
  sed -e 's/#.*//' -e 's/[[:space:]]//g' "$allow_file" | grep -E '^[0-9]{4}$'
}
if [ "$mode" = all ]; then
  mapfile -t tests < <(broker_tests)
else
  mapfile -t tests < <(allow_listed)
fi

run_dir="$cache/run"
logs="$cache/logs"
mkdir -p "$run_dir" "$logs"
cat >"$run_dir/test.conf" <<EOF
bootstrap.servers=$bootstrap
test.timeout.multiplier=$test_timeout_multiplier
test.topic.random=true
EOF

# One allow-listed test: its log, and a result line ("PASS" or "FAIL why") in $logs/$t.result.
run_one() {
  local t=$1 log="$logs/$1.log" rc summary reason
  # -L: no local (broker-less) tests; -E: no socket-emulation tests; -p1: one at a time in
  # this runner (several runners run at once, each on its own random topics and groups).
  # Not -Q: quick mode skips most subtests and passes tests that did nothing.
  # The runner runs in its own directory (some tests read files there).
  set +e
  # The runner links librdkafka dynamically: ours, not a system one (kcat's, say).
  (cd "$src/tests" && LD_LIBRARY_PATH="$src/src:$src/src-cpp" RDKAFKA_TEST_CONF="$run_dir/test.conf" \
    TESTS="$t" TEST_KAFKA_VERSION="$kafka_version" \
    timeout -k 10 "$test_wall_seconds_max" ./test-runner -L -E -p1 >"$log" 2>&1)
  rc=$?
  set -e
  # The runner's summary table has a row per test, "| 0001_multiobj | PASSED | 0.07s |",
  # colored: a number passes when the runner exits 0, one of its tests passed and none failed
  # (its local variants show as SKIPPED, filtered out by -L).
  summary="$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "^\| *${t}_[a-z0-9_]+ +\| " || true)"
  if [ "$rc" = 0 ] && grep -qE '\| +PASSED +\|' <<<"$summary" && ! grep -qE '\| +FAILED +\|' <<<"$summary"; then
    echo "PASS" >"$logs/$t.result"
  else
    reason="$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 -E 'Test .* FAILED|FAIL|TIMEOUT|SKIPPING' | cut -c1-240 || true)"
    echo "FAIL (exit $rc) ${reason:-see $log}" >"$logs/$t.result"
  fi
}

# Most of a test's time is waiting (timeouts, rebalances, linger), so several run at once.
jobs_max=${KAFKA_CONFORMANCE_JOBS:-4}
rm -f "$logs"/*.result
for t in "${tests[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
    wait -n || true
  done
  run_one "$t" &
done
wait

# Several tests assert timings of a few hundred milliseconds (stats intervals, barriers) that
# a loaded 2-core machine can miss while four runners and the server share it: a test that
# failed is run once more on its own, and counts as passing only if that run passes (its
# first log is kept as NNNN.first.log, and the summary names it).
retried=()
for t in "${tests[@]}"; do
  if [ "$(cat "$logs/$t.result" 2>/dev/null)" != PASS ]; then
    cp "$logs/$t.log" "$logs/$t.first.log" 2>/dev/null || true
    run_one "$t"
    retried+=("$t")
  fi
done

passed=0
failed=0
failed_names=()
for t in "${tests[@]}"; do
  result="$(cat "$logs/$t.result" 2>/dev/null || echo "FAIL (no result)")"
  if [ "$result" = PASS ]; then
    passed=$((passed + 1))
    echo "PASS $t"
  else
    failed=$((failed + 1))
    failed_names+=("$t")
    echo "FAIL $t $result"
  fi
done

echo "librdkafka tests: $passed passed, $failed failed of ${#tests[@]}"
[ "${#retried[@]}" -gt 0 ] && echo "run again alone after failing under load: ${retried[*]}"
[ "$failed" -gt 0 ] && echo "failed: ${failed_names[*]} (logs in $logs)"
if [ "$mode" = allow ] && [ "$failed" -gt 0 ]; then
  exit 1
fi
exit 0
