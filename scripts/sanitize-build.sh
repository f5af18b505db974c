#!/bin/sh
# Builds the sanitizer tree (default build-sanitize): clang with
# AddressSanitizer and UndefinedBehaviorSanitizer at -O1, the unit tests and
# the libFuzzer harnesses (tests/fuzz). clang compiles OpenMP pragmas only
# for its own runtime, which Debian's oneDNN does not use: here the pragmas
# are parsed and left serial (-fopenmp=libgomp) and the omp_* calls resolve
# to libgomp, the runtime oneDNN already loads.
#   sh scripts/sanitize-build.sh [BUILD]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
libgomp=$(gcc -print-file-name=libgomp.so)
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTANDEM_SANITIZE=address,undefined -DTANDEM_FUZZ=ON \
  -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_EXAMPLES=OFF -DTANDEM_WITH_CUDA=OFF -DTANDEM_BUILD_PYTHON=OFF \
  -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$libgomp" >/dev/null
cmake --build "$build"
