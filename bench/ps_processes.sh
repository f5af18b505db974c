#!/bin/sh
# The parameter server in one process against across MPI processes
# (1 server rank + N worker ranks), interleaved rounds, examples/second from
# each run's summary.json (the epoch's wall time, evaluation excluded).
#   sh bench/ps_processes.sh [TANDEM] [ROUNDS] [MODEL] [EXAMPLES] [WORKERS]
set -eu
tandem=${1:-build/tandem}
rounds=${2:-3}
model=${3:-cnn}
examples=${4:-12800}
workers=${5:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--model $model --train-examples $examples --test-examples 1000 --epochs 1 --batch-size 128 --threads 1 --allow-oversubscription --quiet --no-memory-plan"
rate() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['examples_per_second']))" "$1/summary.json"; }
for round in $(seq "$rounds"); do
  for rule in async sync; do
    staleness=""
    if [ "$rule" = sync ]; then staleness="--max-staleness 0"; fi
    # shellcheck disable=SC2086
    "$tandem" train --strategy parameter-server --devices "$workers" $staleness $common --output "$work/in-$round-$rule" >/dev/null 2>&1
    # shellcheck disable=SC2086
    mpirun --allow-run-as-root --oversubscribe -np $((workers + 1)) "$tandem" train --strategy parameter-server --ps 1 $staleness $common --output "$work/mpi-$round-$rule" >/dev/null 2>&1
    echo "round $round $rule: one process $(rate "$work/in-$round-$rule") ex/s, $((workers + 1)) processes $(rate "$work/mpi-$round-$rule") ex/s"
  done
done
