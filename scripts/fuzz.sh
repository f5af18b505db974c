#!/bin/sh
# Runs every libFuzzer harness (tests/fuzz) for SECONDS each (default 20) on
# its seed corpus, with ASan and UBSan, and prints executions, corpus size and
# findings per harness. Exit status 1 when any harness finds something (the
# crashing input is kept under BUILD/fuzz-findings/). The build directory
# (default build-sanitize) comes from scripts/sanitize-build.sh.
#   sh scripts/fuzz.sh [SECONDS] [BUILD]
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${2:-build-sanitize}
[ -x "$build/tests/fuzz/write_seeds" ] || { echo "fuzz: no harnesses in $build (run scripts/sanitize-build.sh)" >&2; exit 1; }
corpus="$build/fuzz-corpus"
findings="$build/fuzz-findings"
mkdir -p "$corpus" "$findings"
"$build/tests/fuzz/write_seeds" "$corpus"
# Text formats: the documentation's and examples' own files.
mkdir -p "$corpus/model_file" "$corpus/input_spec" "$corpus/metrics"
cp examples/models/*.toml "$corpus/model_file/"
n=0
for doc in docs/model_files.md docs/training.md; do
  awk -v dir="$corpus" -v doc="$doc" -v start="$n" '
    /^```toml$/ { inside = 1; i++; file = sprintf("%s/block%d.toml", dir, start + i); next }
    /^```$/ { inside = 0; next }
    inside { print > file }' "$doc"
  n=$((n + 100))
done
for f in "$corpus"/block*.toml; do
  if grep -q '^format = ' "$f"; then mv "$f" "$corpus/input_spec/"; else mv "$f" "$corpus/model_file/"; fi
done
cp tests/testdata/tfrecord/*.tfrecord "$corpus/tfrecord/"
if [ -x build/tandem ]; then
  rm -rf "$build/fuzz-run"
  build/tandem train --model mlp --epochs 1 --train-examples 256 --test-examples 64 --threads 1 \
    --quiet --output "$build/fuzz-run" >/dev/null 2>&1 && cp "$build/fuzz-run/metrics.jsonl" "$corpus/metrics/run.jsonl"
fi
status=0
printf '%-12s %12s %8s %8s %9s\n' harness executions exec/s corpus findings
for h in tfrecord example idx csv image checkpoint metrics model_file input_spec; do
  mkdir -p "$corpus/$h" "$findings/$h"
  log="$build/fuzz-$h.log"
  found=0
  # -rss_limit_mb: an input that makes a reader allocate more is a finding.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/${h}_fuzz" "$corpus/$h" -max_total_time="$seconds" -rss_limit_mb=1024 \
    -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 -artifact_prefix="$findings/$h/" \
    >"$log" 2>&1 || found=1
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  files=$(find "$corpus/$h" -type f | wc -l)
  printf '%-12s %12s %8s %8s %9s\n' "$h" "${executions:-?}" "${speed:-?}" "$files" "$found"
  if [ "$found" -ne 0 ]; then
    status=1
    grep -E "ERROR|SUMMARY|runtime error|==[0-9]+==" "$log" | head -5 >&2
  fi
done
exit $status
