#!/bin/sh
# Two builds of libtandem under the same front end (build/tandem or
# build/bench/kernels_bench), alternating in each round with the order
# flipping every round, each run pinned to $CORES (default 0). Prints each
# result line prefixed with old or new. Usage:
#   bench/compare_libraries.sh OLD_DIR NEW_DIR ROUNDS train [tandem bench train flags...]
#   bench/compare_libraries.sh OLD_DIR NEW_DIR ROUNDS kernels [kernels_bench flags...]
# A DIR holds a copy of the library, saved before a change with
#   mkdir -p /tmp/old && cp build/src/libtandem.so.0 /tmp/old
# e.g. bench/compare_libraries.sh /tmp/old build/src 8 train --models resnet
#   --precisions mixed_bfloat16 --threads 1 --steps 20 --warmup 3
# (train runs get --repeats 1 and print the model rows; kernels runs need
# --benchmark_repetitions=N and print each row's median).
set -eu
old=$1; new=$2; rounds=$3; what=$4; shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
for dir in "$old" "$new"; do
  if [ ! -e "$dir/libtandem.so.0" ]; then
    echo "compare_libraries: no libtandem.so.0 in $dir" >&2
    exit 2
  fi
done
log=$(mktemp)
rows=$(mktemp)
trap 'rm -f "$log" "$rows"' EXIT
# A run that fails (an old library without a symbol the front end needs)
# stops the comparison with its output, rather than drop that variant's rows
# (sh has no pipefail: the status is taken before the rows are picked).
run() {
  lib=$1
  shift
  case "$what" in
    train)
      pattern='^(cnn|mlp|resnet|gpt) '
      status=0
      LD_LIBRARY_PATH=$lib taskset -c "${CORES:-0}" "$root/build/tandem" bench train --repeats 1 \
        "$@" > "$log" 2>&1 || status=$? ;;
    kernels)
      pattern='_median'
      status=0
      LD_LIBRARY_PATH=$lib taskset -c "${CORES:-0}" "$root/build/bench/kernels_bench" \
        --benchmark_report_aggregates_only=true "$@" > "$log" 2>&1 || status=$? ;;
    *)
      echo "compare_libraries: expected train or kernels, got '$what'" >&2
      exit 2 ;;
  esac
  if [ "$status" -ne 0 ]; then
    echo "compare_libraries: the run with $lib failed (status $status):" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  grep -E "$pattern" "$log" || true
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for name in $order; do
    if [ "$name" = old ]; then dir=$old; else dir=$new; fi
    run "$dir" "$@" > "$rows"  # not in a pipeline: its exit ends the script
    sed "s/^/$name /" "$rows"
  done
done
