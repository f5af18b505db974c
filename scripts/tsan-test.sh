#!/bin/sh
# ThreadSanitizer over the layers whose threads share state: comm (the
# in-process group, the hierarchical communicator's local half), data
# (parallel map, prefetch, interleave) and distribute (replica threads,
# the Reducer's overlapped buckets, ZeRO's staging slots, the engine).
# Builds build-tsan (the `tsan` CMake preset: gcc, -fsanitize=thread,
# parallel_for serial) and runs the three test programs with every report
# an error. Not part of .ci/run (a TSan build of the library and three test
# programs takes about half an hour on 2 cores); docs/reliability.md has the
# last run's figures.
#   sh scripts/tsan-test.sh [BUILD] [-jN]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
jobs=${2:-}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_SANITIZE=thread \
  -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target comm_test data_test distribute_test $jobs
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
status=0
for layer in comm data distribute; do
  echo "tsan: ${layer}_test"
  # The reference models' long trainings add nothing thread-wise that the
  # equivalence tests on small models do not.
  "$build/tests/${layer}_test" --gtest_brief=1 --gtest_filter='-ReferenceModels.*' || status=1
done
exit $status
