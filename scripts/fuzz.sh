#!/bin/sh
# Runs every libFuzzer harness (tests/fuzz) with ASan and UBSan and prints
# executions, speed, corpus size and findings per harness. Exit status 1 when
# any harness finds something (the crashing input is kept under
# BUILD/fuzz-findings/). The build directory (default build-sanitize) comes
# from scripts/sanitize-build.sh.
#   sh scripts/fuzz.sh SECONDS [BUILD]   explore: SECONDS per harness, random
#                                         seed, the corpus grows across runs
#   sh scripts/fuzz.sh runs:N [BUILD]    N executions per harness (random seed,
#                                         the growing corpus): the 10^6 runs
#                                         of docs/reliability.md
#   sh scripts/fuzz.sh MODE BUILD NAME.. only the harnesses named
#   sh scripts/fuzz.sh smoke [BUILD]     CI: a fixed seed and number of runs
#                                         from the seeds alone (about 10 s per
#                                         harness here), so that CI tries
#                                         nearly the same inputs every time
#                                         (coverage of messages that hold
#                                         paths still varies a little)
set -eu
cd "$(dirname "$0")/.."
mode=${1:-20}
build=${2:-build-sanitize}
shift $(( $# > 2 ? 2 : $# ))
only="$*"
[ -x "$build/tests/fuzz/write_seeds" ] || { echo "fuzz: no harnesses in $build (run scripts/sanitize-build.sh)" >&2; exit 1; }
if [ "$mode" = smoke ]; then
  corpus="$build/fuzz-smoke-corpus"
  rm -rf "$corpus"
else
  corpus="$build/fuzz-corpus"
fi
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
if [ "$mode" != smoke ] && [ -x build/tandem ]; then  # (its timings differ run to run)
  rm -rf "$build/fuzz-run"
  build/tandem train --model mlp --epochs 1 --train-examples 256 --test-examples 64 --threads 1 \
    --quiet --output "$build/fuzz-run" >/dev/null 2>&1 && cp "$build/fuzz-run/metrics.jsonl" "$corpus/metrics/run.jsonl"
fi
status=0
printf '%-12s %12s %8s %8s %9s\n' harness executions exec/s corpus findings
# Smoke runs per harness (harness:runs), from each one's speed on the seeds.
smoke_runs="tfrecord:20000 example:150000 idx:15000 csv:50000 image:30000 checkpoint:100000
  metrics:10000 model_file:4000 input_spec:70000 safetensors:50000"
for entry in $smoke_runs; do
  h=${entry%%:*}
  if [ -n "$only" ] && ! echo " $only " | grep -q " $h "; then continue; fi
  if [ "$mode" = smoke ]; then
    budget="-seed=1 -runs=${entry#*:}"
  elif [ "${mode#runs:}" != "$mode" ]; then
    budget="-runs=${mode#runs:}"
  else
    budget="-max_total_time=$mode"
  fi
  mkdir -p "$corpus/$h" "$findings/$h"
  log="$build/fuzz-$h.log"
  found=0
  # -rss_limit_mb: an input that makes a reader allocate more is a finding.
  # shellcheck disable=SC2086
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/${h}_fuzz" "$corpus/$h" $budget -rss_limit_mb=1024 \
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
