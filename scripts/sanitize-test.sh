#!/bin/sh
# The unit tests under ASan and UBSan (any report fails the test), then a
# short run of every fuzz harness. Leaves out what the main build's suite
# already covers and sanitizers cannot judge: the CLI tests (they time the
# uninstrumented binary's subprocesses), the install check, and the MPI jobs
# (Open MPI's own allocations are not ours to fix).
#   sh scripts/sanitize-test.sh [BUILD] [FUZZ SECONDS]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
seconds=${2:-15}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir "$build" --output-on-failure -j2 -LE "cli|install" -E "^comm\.mpi|^distribute\.multi_worker"
sh scripts/fuzz.sh "$seconds" "$build"
