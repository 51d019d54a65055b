#!/usr/bin/env bash
# Runs franz-go's own client test suite (package github.com/twmb/franz-go/pkg/kgo, the version
# pinned in tests/kafka-go/go.mod) and tinymq's kadm checks (tests/kafka-go/*_test.go, the
# TestTinymq* tests) against a tinymq Kafka listener: both read the listener's address from
# KGO_SEEDS (issue 17's "franz-go conformance"). The sources come from the Go module proxy
# into the module cache; nothing of franz-go is committed.
#
# Usage:
#   scripts/kafka-conformance-go.sh HOST:PORT        run the allow-list
#   scripts/kafka-conformance-go.sh --all HOST:PORT  run every kgo test that talks to a broker
#                                                   (to choose the allow-list); never fails
#   scripts/kafka-conformance-go.sh --build-only     download and compile, run nothing
# The allow-list is tests/kafka-conformance/franz-go-allow.txt: one test name per line, '#'
# starts a comment saying why; one line "skip: PATTERN" leaves out the subtests PATTERN names
# (go test -skip, levels split at '/') of the allow-listed tests. Prints "franz-go tests: P passed, F failed of N" and exits
# non-zero when an allow-listed test does not pass (skipped counts as not passing).
# The full output is kept in .tools/kafka-go/last-run.log.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
module="$root/tests/kafka-go"
allow_file="$root/tests/kafka-conformance/franz-go-allow.txt"
out="$root/.tools/kafka-go"
package="github.com/twmb/franz-go/pkg/kgo"
# Go that understands go.mod's toolchain line (1.21+) fetches the newer toolchain itself.
go_fallback_version="go1.26.0"
suite_timeout="25m"

mode=allow
case "${1:-}" in
  --all) mode=all; shift ;;
  --build-only) mode=build; shift ;;
esac
seeds="${1:-${TINYMQ_KAFKA_ADDR:-}}"
if [ "$mode" != build ] && [ -z "$seeds" ]; then
  echo "usage: $0 [--all] HOST:PORT | --build-only (or set TINYMQ_KAFKA_ADDR)" >&2
  exit 2
fi
mkdir -p "$out"

# A machine without Go gets the official toolchain from the Go module proxy, where Go
# publishes it as the module golang.org/toolchain (what `go` itself downloads).
find_go() {
  if command -v go >/dev/null 2>&1; then command -v go; return; fi
  if [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go; return; fi
  local dir="$root/.tools/go-toolchain"
  local go_bin="$dir/golang.org/toolchain@v0.0.1-$go_fallback_version.linux-amd64/bin/go"
  if [ ! -x "$go_bin" ]; then
    echo "no go on PATH: fetching $go_fallback_version from proxy.golang.org" >&2
    mkdir -p "$dir"
    curl -fsSL -o "$dir/toolchain.zip" \
      "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$go_fallback_version.linux-amd64.zip"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$dir/toolchain.zip" "$dir"
    chmod +x "$dir"/golang.org/toolchain@*/bin/* "$dir"/golang.org/toolchain@*/pkg/tool/*/*
    rm -f "$dir/toolchain.zip"
  fi
  echo "$go_bin"
}
go_bin="$(find_go)"
cd "$module"
"$go_bin" mod download
# Compiling the suite once makes the timing of the run below the suite's own.
"$go_bin" test -count=1 -run '^$' "$package" ./... >/dev/null
[ "$mode" = build ] && exit 0

# kgo's tests that need a broker: the ones that create clients, topics or groups.
broker_tests() {
  local dir
  dir="$("$go_bin" list -f '{{.Dir}}' "$package")"
  awk '/^func Test/ { name = $2; sub(/\(.*/, "", name) }
       /newTestClient|tmpTopic|tmpGroup|getSeedBrokers\(\)/ { if (name != "" && !seen[name]++) print name }' \
    "$dir"/*_test.go
  grep -ohE '^func TestTinymq[A-Za-z0-9_]+' "$module"/*_test.go | cut -d' ' -f2
}
allow_listed() {
  sed -e 's/#.*//' -e 's/[[:space:]]//g' "$allow_file" | grep -E '^Test[A-Za-z0-9_]+$'
}
skipped_subtests() {
  sed -e 's/#.*//' "$allow_file" | sed -n 's/^[[:space:]]*skip:[[:space:]]*\([^[:space:]]*\).*/\1/p' | head -1
}
skip=""
if [ "$mode" = all ]; then
  mapfile -t tests < <(broker_tests)
else
  mapfile -t tests < <(allow_listed)
  skip="$(skipped_subtests)"
fi
pattern="^($(IFS='|'; echo "${tests[*]}"))\$"

# KGO_TEST_RF=1: a single tinymq node; KGO_TEST_RECORDS bounds the ETL tests' record count
# (default 500000) so the run stays short on two cores.
set +e
KGO_SEEDS="$seeds" KGO_TEST_RF="${KGO_TEST_RF:-1}" KGO_TEST_RECORDS="${KGO_TEST_RECORDS:-20000}" \
  KGO_LOG_LEVEL="${KGO_LOG_LEVEL:-info}" \
  "$go_bin" test -count=1 -v -timeout "$suite_timeout" -run "$pattern" ${skip:+-skip "$skip"} "$package" ./... >"$out/last-run.log" 2>&1
set -e

passed=0
failed=0
failed_names=()
for t in "${tests[@]}"; do
  if grep -qE "^--- PASS: $t " "$out/last-run.log"; then
    passed=$((passed + 1))
    echo "PASS $t"
  else
    failed=$((failed + 1))
    failed_names+=("$t")
    status="$(grep -m1 -oE "^--- (FAIL|SKIP): $t " "$out/last-run.log" | cut -d' ' -f2 | tr -d :)"
    echo "FAIL $t (${status:-did not finish})"
  fi
done
echo "franz-go tests: $passed passed, $failed failed of ${#tests[@]}"
[ "$failed" -gt 0 ] && echo "failed: ${failed_names[*]} (output in $out/last-run.log)"
if [ "$mode" = allow ] && [ "$failed" -gt 0 ]; then
  exit 1
fi
exit 0
