#!/bin/sh
# The parameter server across MPI processes with one server rank against
# the variables sharded over two (--ps 1 against --ps 2, the same workers),
# interleaved rounds, examples/second from each run's summary.json (the
# epoch's wall time, evaluation excluded).
#   sh bench/ps_shards.sh [TANDEM] [ROUNDS] [MODEL] [EXAMPLES] [WORKERS] [LAUNCHER]
# LAUNCHER defaults to mpirun; across the test hosts give
# 'sh scripts/netns-hosts.sh mpirun' (after `sh scripts/netns-hosts.sh up 2 1gbit`).
set -eu
tandem=${1:-build/tandem}
rounds=${2:-3}
model=${3:-cnn}
examples=${4:-12800}
workers=${5:-2}
launcher=${6:-mpirun}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--model $model --train-examples $examples --test-examples 1000 --epochs 1 --batch-size 128 --threads 1 --allow-oversubscription --quiet --no-memory-plan"
rate() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['examples_per_second']))" "$1/summary.json"; }
for round in $(seq "$rounds"); do
  for rule in async sync; do
    staleness=""
    if [ "$rule" = sync ]; then staleness="--max-staleness 0"; fi
    line="round $round $rule:"
    for shards in 1 2; do
      # shellcheck disable=SC2086
      $launcher --allow-run-as-root --oversubscribe -np $((workers + shards)) "$tandem" train --strategy parameter-server --ps "$shards" $staleness $common --output "$work/ps$shards-$round-$rule" >/dev/null 2>&1
      line="$line --ps $shards $(rate "$work/ps$shards-$round-$rule") ex/s,"
    done
    echo "$line"
  done
done
