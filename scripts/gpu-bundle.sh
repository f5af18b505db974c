#!/bin/sh
# Packs what scripts/gpu-check.sh runs on a machine with an NVIDIA GPU, where
# nothing can be installed: tandem and the GPU tests, built here with the
# CUDA backend, and the Debian shared libraries they load (oneDNN, fmt,
# protobuf, ...), in one compressed file. Left out: the C and C++ runtimes
# (the GPU machine's own, which are newer) and CUDA's libraries (the GPU
# machine's, which match its driver; gpu-check.sh finds them there).
#   sh scripts/gpu-bundle.sh [--data] [BUILD] [OUT]   (defaults: build, .gpu)
# --data adds Fashion-MNIST (Debian's dataset-fashion-mnist, 30 MB) and the
# King James Bible cut into gpt's sequences (`tandem data text --corpus
# kjv`; Debian's bible-kjv) for gpu-check.sh's accuracy steps.
# Then carry OUT to the GPU machine beside the checkout and run
#   sh scripts/gpu-check.sh
set -eu
cd "$(dirname "$0")/.."
data=0
if [ "${1:-}" = "--data" ]; then
  data=1
  shift
fi
build=${1:-build}
out=${2:-.gpu}
if ! grep -q "define TANDEM_HAVE_CUDA 1" "$build/generated/tandem/config.h" 2>/dev/null; then
  echo "gpu-bundle: $build is not a CUDA build (configure it where the CUDA toolkit is installed)" >&2
  exit 1
fi
# tandem_cli is the command (`tandem` is the library, which gpu_test needs).
cmake --build "$build" --target tandem_cli gpu_test
rm -rf "$out"
mkdir -p "$out/stage/bin" "$out/stage/lib"
cp "$build/tandem" "$build/tests/gpu_test" "$out/stage/bin/"
# A library the loader cannot find here would be missing there too.
if for f in "$out"/stage/bin/*; do ldd "$f"; done | grep "not found" >&2; then
  echo "gpu-bundle: a library the programs load is not found (above)" >&2
  exit 1
fi
for f in "$out"/stage/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | ld-linux* | libpthread.so* | \
        libdl.so* | librt.so* | libcuda.so* | libcudart.so* | libcublas* | libcudnn* | \
        libnccl* | libnvrtc* | libnvJitLink*) ;;
      *) cp -L "$lib" "$out/stage/lib/" ;;
    esac
  done
if [ $data -eq 1 ]; then
  mkdir -p "$out/stage/data"
  cp -r /usr/share/datasets/fashion-mnist "$out/stage/data/"
  "$build/tandem" data text --corpus kjv --output "$out/stage/data/kjv" > /dev/null
fi
git describe --always --dirty > "$out/stage/commit" 2>/dev/null || echo unknown > "$out/stage/commit"
tar -C "$out/stage" -cJf "$out/bundle.tar.xz" .
rm -rf "$out/stage"
ls -l "$out/bundle.tar.xz"
