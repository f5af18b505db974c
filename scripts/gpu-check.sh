#!/bin/sh
# The device check of the CUDA backend, one command on a machine with an
# NVIDIA GPU and nothing installable: unpacks .gpu/bundle.tar.xz (made by
# scripts/gpu-bundle.sh on a machine with the CUDA toolkit), finds the CUDA
# libraries the GPU machine has (its toolkit or PyTorch's wheels), and runs
# these steps (GPU_CHECK_STEPS, space-separated, picks some; default all):
#   nvidia_smi, info      the GPU, driver and library versions
#   gpu_test              every GPU test in its own process (a crash or a
#                         sticky CUDA error fails that test, not the rest)
#   sanitize              the failed GPU tests again under compute-sanitizer
#                         (memcheck), where the machine has it
#   peak                  the matmul peak: f32, TF32 and bf16
#   train, train_gpt, train_convnets
#                         training throughput (`bench train`): mlp, gpt,
#                         cnn and resnet in f32 and mixed bf16
#   accuracy_cnn, accuracy_cnn_file, accuracy_resnet, accuracy_gpt
#                         `tandem train --device cuda` with the recipes whose
#                         CPU results docs/gpu.md compares (the cnn, the cnn
#                         as a model file, ResNet-20 on Fashion-MNIST, gpt
#                         on the KJV), when the bundle carries the data
#                         (scripts/gpu-bundle.sh --data); accuracy_cnn also
#                         writes the report of its run (report.html)
#   pytorch_resnet, pytorch_gpt2_small, train_gpt2_small
#                         PyTorch eager and tandem side by side (bf16)
#   pytorch_compile_gpt2_small
#                         PyTorch with torch.compile on GPT-2-small (bf16)
#   profile_gpt2_small, profile_resnet (GPT-2-small at 6 layers: half the
#                         launches to profile, the same per layer)
#                         where one bf16 step's device time goes, per
#                         kernel (Nsight Compute; scripts/gpu-kernel-table.py)
#   pytorch_profile_gpt2_small, pytorch_profile_resnet
#                         the same for PyTorch eager (torch.profiler)
# Every step has its own time limit and the whole a deadline
# (GPU_CHECK_SECONDS, default 480): a step that would start past it is
# skipped. Writes gpu-check.json (every step's status and figures) and
# logs.tar.gz (every log) to $OUT, or to ./gpu-check when OUT is unset; the
# summary is printed last. Exit status 0 only when every step run passed.
#   sh scripts/gpu-check.sh [BUNDLE]
set -u
cd "$(dirname "$0")/.."

# Each GPU test alone: its result lands in $logs/gpu_test/NAME.json.
gpu_tests() {
  mkdir -p "$logs/gpu_test"
  failed=0
  # A gpu_test that cannot even list its tests (a crash at load) fails
  # here, not as a run of no tests.
  "$bin/gpu_test" --gtest_list_tests > "$logs/gpu_test/list.txt" 2>&1 ||
    { cat "$logs/gpu_test/list.txt"; return 1; }
  tests=$(awk '/^[^ ]/ {s=$1} /^  / {print s $1}' "$logs/gpu_test/list.txt")
  [ -n "$tests" ] || { echo "gpu_test lists no tests"; return 1; }
  for t in $tests; do
    left=$((deadline - $(date +%s)))
    [ "$left" -lt 10 ] && { echo "$t: not run (deadline)"; failed=1; continue; }
    limit=60
    [ "$limit" -gt "$left" ] && limit=$left
    start=$(date +%s)
    timeout "$limit" "$bin/gpu_test" --gtest_filter="$t" \
      --gtest_output="json:$logs/gpu_test/$t.json" > "$logs/gpu_test/$t.log" 2>&1
    rc=$?
    echo "$t: rc=$rc ($(($(date +%s) - start)) s)"
    [ $rc -eq 0 ] || { failed=1; echo "$t" >> "$logs/gpu_test_failed"; }
  done
  return $failed
}

# The failed tests again under compute-sanitizer's memcheck (3 at most).
sanitize() {
  [ -f "$logs/gpu_test_failed" ] || { echo "no failed GPU test"; return 0; }
  command -v compute-sanitizer > /dev/null || { echo "no compute-sanitizer"; return 1; }
  # sh has no pipefail: memcheck's status is taken before its tail is shown.
  failed=0
  for t in $(head -n 3 "$logs/gpu_test_failed"); do
    echo "== $t"
    timeout 60 compute-sanitizer --tool memcheck --print-limit 20 "$bin/gpu_test" \
      --gtest_filter="$t" > "$logs/memcheck-$t.log" 2>&1 || failed=1
    tail -n 80 "$logs/memcheck-$t.log"
  done
  return $failed
}

# The recipes of docs/gpu.md's accuracy table on the GPU, when the bundle
# carries the data: accuracy MODEL.
accuracy() {
  fashion=$work/data/fashion-mnist kjv=$work/data/kjv
  [ -d "$fashion" ] && [ -d "$kjv" ] || { echo "the bundle has no data (gpu-bundle.sh --data)"; return 1; }
  case $1 in
    cnn)
      for precision in float32 mixed_bfloat16; do
        echo "== cnn, $precision"
        "$bin/tandem" train --device cuda --model cnn --epochs 5 --precision "$precision" \
          --data-dir "$fashion" --output "$work/runs/cnn-$precision" || return 1
      done
      # The report of the last run (the step breakdown from device events).
      "$bin/tandem" report "$work/runs/cnn-mixed_bfloat16" --output "$OUT_DIR/report.html" ;;
    cnn_file)
      "$bin/tandem" train --device cuda --model examples/models/cnn.toml --epochs 5 \
        --data-dir "$fashion" --output "$work/runs/cnn-file" ;;
    resnet)
      "$bin/tandem" train --device cuda --model resnet --optimizer sgd --lr 0.1 --momentum 0.9 \
        --nesterov --weight-decay 5e-4 --schedule cosine --warmup-epochs 1 --epochs 12 \
        --batch-size 128 --augment flip,crop:2 --precision mixed_bfloat16 --seed 1 \
        --data-dir "$fashion" --output "$work/runs/resnet" ;;
    gpt)
      "$bin/tandem" train --device cuda --model gpt --data "$kjv/train.toml" \
        --validation-data "$kjv/validation.toml" --metrics bits_per_byte,perplexity \
        --optimizer adamw --lr 1e-3 --clip-norm 1 --batch-size 32 --steps-per-epoch 239 \
        --epochs 4 --precision mixed_bfloat16 --output "$work/runs/gpt" ;;
  esac
}

# One warm-up and one timed step of `bench train` under Nsight Compute, each
# kernel's device time; the kernels of the timed step are then tabulated by
# name: profile NAME BOUNDARY BENCH-ARGS... (BOUNDARY: the optimizer kernel
# that ends each step).
profile() {
  name=$1 boundary=$2
  shift 2
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  [ -n "$ncu" ] || { echo "no ncu on this machine"; return 1; }
  "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --csv --page raw --print-kernel-base function --launch-count 20000 \
    --log-file "$logs/$name.csv" "$bin/tandem" bench train --device cuda:0 \
    --precisions mixed_bfloat16 --steps 1 --warmup 1 --repeats 1 "$@" || return 1
  python3 "$PWD/scripts/gpu-kernel-table.py" "$logs/$name.csv" --boundary "$boundary" \
    --rows 45 > "$OUT_DIR/$name.txt"
  rc=$?  # the table's status, not tee's (sh has no pipefail)
  cat "$OUT_DIR/$name.txt"
  return $rc
}

# `timeout` runs programs, not shell functions: the functions above run as
# this script again, with their state in the environment.
if [ "${1:-}" = "--step" ]; then
  shift
  "$@"
  exit
fi

bundle=${1:-.gpu/bundle.tar.xz}
out=${OUT:-$PWD/gpu-check}
all_steps="nvidia_smi info gpu_test sanitize peak train train_gpt train_convnets accuracy_gpt
  accuracy_cnn accuracy_cnn_file accuracy_resnet pytorch_resnet pytorch_gpt2_small
  train_gpt2_small profile_gpt2_small profile_resnet pytorch_profile_gpt2_small
  pytorch_profile_resnet pytorch_compile_gpt2_small"
wanted=${GPU_CHECK_STEPS:-$all_steps}
deadline=$(($(date +%s) + ${GPU_CHECK_SECONDS:-480}))
mkdir -p "$out"
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$logs"
trap 'rm -rf "$work"' EXIT
status=0
steps=""

wants() {
  for w in $wanted; do [ "$w" = "$1" ] && return 0; done
  return 1
}

# step NAME SECONDS COMMAND...: runs it with a time limit (cut to the
# deadline), logging to $logs/NAME.log; skipped when not wanted or when
# under 10 seconds remain.
step() {
  name=$1 limit=$2
  shift 2
  wants "$name" || return 0
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 10 ]; then
    echo "gpu-check: $name skipped (deadline)"
    steps="$steps $name:skipped:0"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  start=$(date +%s)
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
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
    echo "gpu-check: $name not found on this machine" | tee -a "$logs/libraries.log"
    status=1
  else
    echo "$name: $found" >> "$logs/libraries.log"
    libs="$libs:$(dirname "$found")"
  fi
done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$work/bin
export bin logs work deadline
export OUT_DIR="$out"
self="$PWD/scripts/gpu-check.sh"

step nvidia_smi 30 nvidia-smi
step info 60 "$bin/tandem" info --json
step gpu_test 300 sh "$self" --step gpu_tests
step sanitize 200 sh "$self" --step sanitize
step peak 150 "$bin/tandem" bench peak --device cuda:0 --dtypes f32,tf32,bf16 --size 8192 \
  --repeats 3 --json
step train 120 "$bin/tandem" bench train --device cuda:0 --models mlp \
  --precisions float32,mixed_bfloat16 --batch-size 4096 --steps 20 --warmup 3 --repeats 3 --json
step train_gpt 120 "$bin/tandem" bench train --device cuda:0 --models gpt \
  --precisions float32,mixed_bfloat16 --batch-size 64 --steps 10 --warmup 2 --repeats 3 --json
step train_convnets 120 "$bin/tandem" bench train --device cuda:0 --models cnn,resnet \
  --precisions float32,mixed_bfloat16 --batch-size 256 --steps 20 --warmup 3 --repeats 3 --json
step accuracy_gpt 150 sh "$self" --step accuracy gpt
step accuracy_cnn 120 sh "$self" --step accuracy cnn
step accuracy_cnn_file 90 sh "$self" --step accuracy cnn_file
step accuracy_resnet 240 sh "$self" --step accuracy resnet
step pytorch_resnet 90 python3 bench/pytorch/bench_models.py --model resnet --device cuda \
  --precision bf16 --batch-size 256 --steps 20 --warmup 3 --json
step pytorch_gpt2_small 120 python3 bench/pytorch/bench_models.py --model gpt --device cuda \
  --precision bf16 --layers 12 --width 768 --heads 12 --context 1024 --batch-size 8 --steps 10 \
  --warmup 3 --json
step train_gpt2_small 150 "$bin/tandem" bench train --device cuda:0 --models gpt \
  --model-options layers=12,width=768,heads=12,context=1024 --precisions mixed_bfloat16 \
  --batch-size 8 --steps 10 --warmup 2 --repeats 3 --json
step profile_gpt2_small 240 sh "$self" --step profile profile_gpt2_small sgd_kernel \
  --models gpt --model-options layers=6,width=768,heads=12,context=1024 --batch-size 8
step profile_resnet 150 sh "$self" --step profile profile_resnet sgd_kernel \
  --models resnet --batch-size 256
step pytorch_profile_gpt2_small 90 python3 bench/pytorch/bench_models.py --model gpt \
  --device cuda --precision bf16 --layers 12 --width 768 --heads 12 --context 1024 \
  --batch-size 8 --steps 3 --warmup 3 --kernel-table "$OUT_DIR/pytorch_profile_gpt2_small.txt"
step pytorch_profile_resnet 90 python3 bench/pytorch/bench_models.py --model resnet \
  --device cuda --precision bf16 --batch-size 256 --steps 3 --warmup 3 \
  --kernel-table "$OUT_DIR/pytorch_profile_resnet.txt"
step pytorch_compile_gpt2_small 240 python3 bench/pytorch/bench_models.py --model gpt \
  --device cuda --precision bf16 --layers 12 --width 768 --heads 12 --context 1024 \
  --batch-size 8 --steps 10 --warmup 3 --compile --json

python3 - "$out" "$logs" "$(cat "$work/commit")" $steps <<'PY'
import glob, json, os, sys
out, logs, commit, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
result = {"commit": commit, "steps": {}}
for s in steps:
    name, rc, seconds = s.split(":")
    result["steps"][name] = {"rc": rc if rc == "skipped" else int(rc), "seconds": int(seconds)}
def load(path):
    try:
        return json.load(open(path))
    except Exception as e:
        return {"unreadable": str(e)}
result["info"] = load(os.path.join(logs, "info.log"))
cases = {}
for path in sorted(glob.glob(os.path.join(logs, "gpu_test", "*.log"))):
    test = os.path.basename(path)[:-4]
    report = load(path[:-4] + ".json")
    if "testsuites" in report:
        t = report["testsuites"][0]["testsuite"][0]
        cases[test] = ("failed" if t.get("failures") else
                       "skipped" if t.get("result") == "SKIPPED" else "passed")
    else:  # no report: the process crashed or ran out of time
        tail = open(path, errors="replace").read()[-600:]
        cases[test] = "crashed: " + tail
if cases:
    result["gpu_test"] = {"tests": len(cases),
                          "passed": [n for n, c in cases.items() if c == "passed"],
                          "skipped": [n for n, c in cases.items() if c == "skipped"],
                          "failed": {n: c for n, c in cases.items()
                                     if c not in ("passed", "skipped")}}
    for name, c in result["gpu_test"]["failed"].items():
        if c == "failed":  # the assertion messages
            report = load(os.path.join(logs, "gpu_test", name + ".json"))
            fails = report["testsuites"][0]["testsuite"][0].get("failures", [])
            result["gpu_test"]["failed"][name] = [f["failure"][:400] for f in fails[:3]]
for name in ("peak", "train", "train_gpt", "train_gpt2_small", "train_convnets",
             "pytorch_resnet", "pytorch_gpt2_small", "pytorch_compile_gpt2_small"):
    path = os.path.join(logs, name + ".log")
    if not os.path.exists(path):
        continue
    try:
        text = open(path).read()
        starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
        result[name] = json.loads(text[min(starts):])
    except Exception as e:
        result[name] = {"unreadable": str(e), "tail": text[-400:]}
for name in ("accuracy_gpt", "accuracy_cnn", "accuracy_cnn_file", "accuracy_resnet"):
    path = os.path.join(logs, name + ".log")
    if os.path.exists(path):  # the epoch lines and the result
        lines = open(path, errors="replace").read().splitlines()
        result[name] = [l for l in lines if l.startswith(("==", "epoch", "done", "tandem:"))]
json.dump(result, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print(json.dumps(result, indent=2))
PY
tar -C "$work" -czf "$out/logs.tar.gz" logs
exit $status
