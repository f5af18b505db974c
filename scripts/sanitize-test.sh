#!/bin/sh
# The unit tests under ASan and UBSan (any report fails the test), then the
# fuzz harnesses' smoke runs (a fixed seed and number of runs). Leaves out
# what the main build's suite already covers and sanitizers cannot judge:
# the CLI tests (they time the binary's subprocesses), the monitor's timeline
# check and diagnoses of slow stages (timing), the install check, and the MPI
# jobs (Open MPI's own allocations are not ours to fix). The readers' time
# and peak-RSS limits are not checked here (TANDEM_SANITIZED): shadow memory
# and quarantine make them meaningless. kernels.portable_loops (the op
# table again with the AVX-512 paths off) is left to the main build: under
# the sanitizers it took three minutes; kernels.without_amx likewise.
#   sh scripts/sanitize-test.sh [BUILD]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
# allocator_may_return_null: tests that ask for impossible sizes check the error path.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir "$build" --output-on-failure -j2 -LE "cli|install|multi_host" \
  -E "^comm\.mpi|^distribute\.multi_worker|^distribute\.parameter_server\.mpi|^Monitor\.(Slow|Prefetch|ParallelBatch)|^Timeline\.|^kernels\.(portable_loops|without_amx)$"
sh scripts/fuzz.sh smoke "$build"
