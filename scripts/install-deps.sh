#!/bin/sh
# Installs tandem's build, test and run dependencies from Debian 12's packages.
# Idempotent: when everything is present it prints nothing and touches nothing.
set -eu
# ocl-icd-opencl-dev: Debian's oneDNN CMake package looks for OpenCL (its GPU
# runtime) and fails to configure without it. chromium: the test that renders
# `tandem report`'s HTML headless and checks its screenshot. clang and
# libclang-rt-14-dev (only recommended by clang, so named): the sanitizer
# build and libFuzzer (scripts/sanitize-build.sh); libomp-14-dev for clang's
# omp.h (the code still runs on libgomp, oneDNN's OpenMP runtime).
# clang-format: the style test (every source as .clang-format says).
# libonnx-dev and libprotobuf-dev: ONNX export (its message classes and
# checker). python3-onnx and python3-opencv: the test that checks the export
# with ONNX's Python checker and runs it in OpenCV's DNN module.
# python3-torch and python3-protobuf: the interop tests that load tandem's
# safetensors into PyTorch's own models (and PyTorch's into tandem) and parse
# its TensorBoard event files with Google's protobuf runtime. iproute2 and
# procps: the test hosts in network namespaces (scripts/netns-hosts.sh) and
# the fault tests' checks for processes left behind. python3-dev,
# pybind11-dev, libdlpack-dev, python3-numpy and python3-pytest: the Python
# package (python/, docs/python.md) and its tests. libgloo-dev: collectives
# between processes without MPI (tandem launch, elastic training).
packages="build-essential cmake ninja-build pkg-config ccache
  libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin zlib1g-dev libturbojpeg0-dev libpng-dev libhwloc-dev libfmt-dev
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libonnx-dev libprotobuf-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist bible-kjv chromium clang clang-format libclang-rt-14-dev libomp-14-dev
  python3-torch python3-protobuf python3-onnx python3-opencv iproute2 procps
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-pytest libgloo-dev"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages:$missing; run as root or install them with apt-get" >&2
  exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
