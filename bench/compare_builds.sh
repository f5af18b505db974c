#!/bin/sh
# Training throughput of two tandem builds, alternating in each round (the
# order flips every round), one epoch per run; prints each build's
# examples/s per round. Usage:
#   bench/compare_builds.sh OLD_TANDEM NEW_TANDEM MODEL EXAMPLES ROUNDS [train flags...]
# e.g. bench/compare_builds.sh /tmp/baseline/tandem build/tandem mlp 32768 9
# (a saved build needs its libtandem.so next to it: LD_LIBRARY_PATH is set to
# each binary's folder).
set -eu
old=$1; new=$2; model=$3; examples=$4; rounds=$5; shift 5
# Without its own library a binary loads the checkout's (its RUNPATH): the
# "old" build would run the new library.
for bin in "$old" "$new"; do
  if [ ! -e "$(dirname "$bin")/libtandem.so.0" ] && [ ! -e "$(dirname "$bin")/src/libtandem.so.0" ]; then
    echo "compare_builds: no libtandem.so.0 beside $bin (copy it there)" >&2
    exit 1
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$rounds"); do
  for turn in 1 2; do
    if [ $(( (r + turn) % 2 )) -eq 0 ]; then name=old; bin=$old; else name=new; bin=$new; fi
    LD_LIBRARY_PATH=$(dirname "$bin") "$bin" train --model "$model" --epochs 1 \
      --train-examples "$examples" --test-examples 100 --no-monitor --quiet \
      --output "$work/$name" "$@" >/dev/null
    python3 -c "import json,sys; print(sys.argv[1], round(json.load(open(sys.argv[2]))['examples_per_second']))" \
      "$name" "$work/$name/summary.json"
    rm -rf "$work/$name"
  done
done
