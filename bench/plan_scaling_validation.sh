#!/bin/sh
# The scaling planner against measurements across two test hosts (network
# namespaces, scripts/netns-hosts.sh; needs root): for each data-link rate,
# the link's all-reduce tables (f32, and the compressed bf16 all-reduce that
# --wire bf16 runs; alone and beside a computing thread); for each model, a profile (below); then
# for each rate x wire x model, the predicted and the measured step time of
# multi-worker training on 2 hosts (one process and device each, one thread
# each, BATCH examples per device as in the profile).
# PROFILE "one" takes each model's profile from a one-device run; "mirrored"
# (the default) from a mirrored run of 2 devices, one thread each: the test
# hosts share this machine's cores, so each host's device computes while the
# other's does, as a mirrored run's devices do (docs/multi_host.md).
# ROUNDS (environment, default 3): rounds of profile, links and runs; the
# table gives medians over them.
# MODES (environment, default all-reduce): the ways of keeping in step to
# run and plan (plan scaling --modes): all-reduce (f32 and bf16 wire),
# zero1, zero2, local-sgd:K, ps-sync:N, ps-async:N (f32). The parameter
# server's N shard ranks get hosts of their own (h0 ..), its 2 workers the
# next two, as the planner assumes.
# BATCH: examples per device (default 128). DATA (environment): a data
# specification to train on instead of Fashion-MNIST (gpt: DATA=data/kjv/train.toml),
# EXAMPLES examples of it a run.
# usage: bench/plan_scaling_validation.sh TANDEM [RATES] [MODELS] [EXAMPLES] [PROFILE] [BATCH]
#   e.g. bench/plan_scaling_validation.sh build/tandem "none 1gbit 100mbit 1gbit@2ms" "mlp cnn" 6400
#        MODES="zero1 zero2 local-sgd:8 ps-sync:1 ps-async:1" bench/plan_scaling_validation.sh \
#          build/tandem "1gbit 100mbit" "mlp cnn" 6400
# A rate may carry a delay per data link after @ (netns-hosts.sh delay; the
# link-delay program must be built).
set -eu
tandem=$(readlink -f "$1")
rates=${2:-none 1gbit 100mbit}
models=${3:-mlp cnn}
examples=${4:-6400}
profile=${5:-mirrored}
batch=${6:-128}
case $profile in
  one) profile_flags="--batch-size $batch" ;;
  mirrored) profile_flags="--strategy mirrored --devices 2 --allow-oversubscription --batch-size $((2 * batch))" ;;
  *) echo "PROFILE must be one or mirrored, got '$profile'" >&2; exit 2 ;;
esac
netns="$(dirname "$(readlink -f "$0")")/../scripts/netns-hosts.sh"
export TANDEM_NETNS_PREFIX=tandem-plan
work=$(mktemp -d)
trap '"$netns" down; rm -rf "$work"' EXIT
modes=${MODES:-all-reduce}
hosts=2
for mode in $modes; do
  case $mode in ps-*:*) n=${mode#*:}; hosts=$((n + 2 > hosts ? n + 2 : hosts)) ;; ps-*) hosts=3 ;; esac
done
"$netns" up "$hosts"
if [ -n "${DATA:-}" ]; then
  size="--data $DATA --steps-per-epoch $((examples / (2 * batch)))"
else
  size="--train-examples $examples --test-examples 100"
fi
common="--threads 1 --epochs 1 $size --quiet"
# Each round profiles every model, measures the links and trains every
# configuration once; the table gives the medians over the rounds (this
# machine's speed drifts by tens of percent from minute to minute, so one
# sample of an 8 ms step says little).
rounds=${ROUNDS:-3}
results="$work/results"
: >"$results"
round=1
while [ "$round" -le "$rounds" ]; do
  for model in $models; do
    rm -rf "$work/profile-$model"
    # shellcheck disable=SC2086
    "$tandem" train --model "$model" $profile_flags $common --output "$work/profile-$model" >/dev/null
  done
  for rate in $rates; do
    "$netns" shape "${rate%@*}"
    case $rate in *@*) "$netns" delay "${rate#*@}" ;; *) "$netns" delay none ;; esac
    # The link in f32, and the compressed all-reduce that --wire bf16 runs;
    # each also while a thread per host computes, as training's one does.
    for wire in f32 bf16; do
      "$netns" mpirun -np 2 "$tandem" bench allreduce --backend mpi --min-bytes 4 --max-bytes 4M \
        --repeats 3 --wire "$wire" --busy-threads 1 --json >"$work/link-$rate-$wire.json"
    done
    for model in $models; do
      for mode in $modes; do
        case $mode in
          all-reduce) wires="f32 bf16" ;;
          *) wires=f32 ;;
        esac
        for wire in $wires; do
          np=2
          flags="--strategy multi-worker --devices 1 --wire $wire"
          case $mode in
            zero1) flags="$flags --zero 1" ;;
            zero2) flags="$flags --zero 2" ;;
            local-sgd:*) flags="$flags --sync-every ${mode#*:}" ;;
            ps-sync:* | ps-async:*)
              np=$((${mode#*:} + 2))
              flags="--strategy parameter-server --devices 1 --ps ${mode#*:}"
              case $mode in ps-sync:*) flags="$flags --max-staleness 0" ;; esac
              ;;
          esac
          # shellcheck disable=SC2086
          "$netns" mpirun -np $np "$tandem" train --model "$model" $flags \
            --batch-size $((2 * batch)) $common --output "$work/run" >/dev/null
          predicted=$("$tandem" plan scaling "$work/profile-$model" --hosts 2 --wire "$wire" \
            --modes "$mode" --link "$work/link-$rate-f32.json,$work/link-$rate-bf16.json" --json |
            python3 -c "import json,sys; print(json.load(sys.stdin)['predictions'][0]['step_seconds'])")
          measured=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['monitor']['mean_step_seconds'])" \
            "$work/run/summary.json")
          echo "$rate $model $mode $wire $predicted $measured" >>"$results"
          echo "round $round: $rate $model $mode $wire predicted $predicted s, measured $measured s" >&2
          rm -rf "$work/run"
        done
      done
    done
  done
  round=$((round + 1))
done
python3 - "$results" "$rates" "$models" "$modes" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print('%-11s %-6s %-12s %-5s %14s %24s %8s' % ('rate', 'model', 'mode', 'wire', 'predicted_ms', 'measured_ms (min-max)', 'error_%'))
for rate in sys.argv[2].split():
    for model in sys.argv[3].split():
        for mode in sys.argv[4].split():
            for wire in ('f32', 'bf16'):
                key = [rate, model, mode, wire]
                p = [1e3 * float(r[4]) for r in rows if r[:4] == key]
                m = [1e3 * float(r[5]) for r in rows if r[:4] == key]
                if not p:
                    continue
                pm, mm = statistics.median(p), statistics.median(m)
                print('%-11s %-6s %-12s %-5s %14.2f %10.2f (%.2f-%.2f) %8.1f' % (rate, model, mode, wire, pm, mm, min(m), max(m), 100 * (pm - mm) / mm))
PY
