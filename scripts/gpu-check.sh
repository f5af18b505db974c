#!/bin/sh
# The device check of the CUDA backend, one command on a machine with an
# NVIDIA GPU and nothing installable: unpacks .gpu/bundle.tar.xz (made by
# scripts/gpu-bundle.sh on a machine with the CUDA toolkit), finds the CUDA
# libraries the GPU machine has (its toolkit or PyTorch's wheels), and runs
#   1. nvidia-smi and `tandem info` (the GPU, driver and library versions),
#   2. the GPU tests: every CUDA kernel against the CPU (tests/gpu),
#   3. the matmul peak on the GPU: f32, TF32 and bf16 (`tandem bench peak`),
#   4. training throughput on the GPU (`bench train`): mlp, cnn and resnet
#      in f32 and mixed bf16, and gpt at the default size and at
#      GPT-2-small size (12 layers, width 768, context 1024) in mixed bf16,
#   5. PyTorch eager on the same GPU, same models and batches, bf16
#      autocast (bench/pytorch/bench_models.py --device cuda): GPT-2-small
#      gpt and resnet, for the side-by-side ratio.
# Each step has a time limit; the whole stays under 8 minutes. Writes
# gpu-check.json (every step's status and figures) and each step's log to
# $OUT, or to ./gpu-check when OUT is unset. Exit status 0 only when every
# step passed.
#   sh scripts/gpu-check.sh [BUNDLE]
set -u
cd "$(dirname "$0")/.."
bundle=${1:-.gpu/bundle.tar.xz}
out=${OUT:-$PWD/gpu-check}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
steps=""

# step NAME SECONDS COMMAND...: runs it with a time limit, logging to $out/NAME.log.
step() {
  name=$1 limit=$2
  shift 2
  start=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - start))
  [ $rc -eq 0 ] || status=1
  echo "gpu-check: $name rc=$rc (${seconds} s)"
  steps="$steps $name:$rc:$seconds"
}

if [ ! -f "$bundle" ]; then
  echo "gpu-check: no bundle at $bundle: run scripts/gpu-bundle.sh where the CUDA toolkit is" >&2
  exit 1
fi
tar -C "$work" -xJf "$bundle"
libs=$work/lib
for name in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$name" 2>/dev/null | head -n 1)
  if [ -z "$found" ]; then
    echo "gpu-check: $name not found on this machine" | tee -a "$out/libraries.log"
    status=1
  else
    echo "$name: $found" >> "$out/libraries.log"
    libs="$libs:$(dirname "$found")"
  fi
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$work/bin

step nvidia_smi 30 nvidia-smi
step info 60 "$bin/tandem" info --json
step gpu_test 240 "$bin/gpu_test" --gtest_output="json:$out/gpu_test.json"
step peak 150 "$bin/tandem" bench peak --device cuda:0 --dtypes f32,tf32,bf16 --size 8192 \
  --repeats 3 --json
step train 120 "$bin/tandem" bench train --device cuda:0 --threads 4 --models mlp \
  --precisions float32,mixed_bfloat16 --batch-size 4096 --steps 20 --warmup 3 --repeats 3 --json
step train_gpt 120 "$bin/tandem" bench train --device cuda:0 --threads 4 --models gpt \
  --precisions float32,mixed_bfloat16 --batch-size 64 --steps 10 --warmup 2 --repeats 3 --json
step train_convnets 120 "$bin/tandem" bench train --device cuda:0 --threads 4 --models cnn,resnet \
  --precisions float32,mixed_bfloat16 --batch-size 256 --steps 20 --warmup 3 --repeats 3 --json
step pytorch_resnet 90 python3 bench/pytorch/bench_models.py --model resnet --device cuda \
  --precision bf16 --batch-size 256 --steps 20 --warmup 3 --json
step pytorch_gpt2_small 120 python3 bench/pytorch/bench_models.py --model gpt --device cuda \
  --precision bf16 --layers 12 --width 768 --heads 12 --context 1024 --batch-size 8 --steps 10 \
  --warmup 3 --json
step train_gpt2_small 150 "$bin/tandem" bench train --device cuda:0 --threads 4 --models gpt \
  --model-options layers=12,width=768,heads=12,context=1024 --precisions mixed_bfloat16 \
  --batch-size 8 --steps 10 --warmup 2 --repeats 3 --json

python3 - "$out" "$(cat "$work/commit")" $steps <<'PY'
import json, os, sys
out, commit, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {"commit": commit, "steps": {}}
for s in steps:
    name, rc, seconds = s.split(":")
    result["steps"][name] = {"rc": int(rc), "seconds": int(seconds)}
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        return {"unreadable": str(e)}
result["info"] = load("info.log")
tests = load("gpu_test.json")
if "testsuites" in tests:
    cases = [(f"{s['name']}.{t['name']}", t) for s in tests["testsuites"]
             for t in s.get("testsuite", [])]
    result["gpu_test"] = {"tests": tests.get("tests"), "failures": tests.get("failures"),
                          "failed": [n for n, t in cases if t.get("failures")],
                          "skipped": [n for n, t in cases if t.get("result") == "SKIPPED"]}
for name in ("peak", "train", "train_gpt", "train_gpt2_small", "train_convnets",
             "pytorch_resnet", "pytorch_gpt2_small"):
    try:
        text = open(os.path.join(out, name + ".log")).read()
        starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
        result[name] = json.loads(text[min(starts):])
    except Exception as e:
        result[name] = {"unreadable": str(e)}
json.dump(result, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print(json.dumps(result, indent=2))
PY
exit $status
