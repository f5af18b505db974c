#!/bin/sh
# Figures across two test hosts (network namespaces, scripts/netns-hosts.sh;
# needs root): all-reduce bus bandwidth at each data-link rate, and mlp
# training throughput with --wire bf16 at 1 Gbit/s, for tandem's settings
# ("new") and for the path before them ("old": OLD_TANDEM, a build of an
# earlier commit, or without it OpenMPI's busy polling, mpi_yield_when_idle
# 0), alternating in each round.
# usage: bench/multi_host.sh TANDEM [ROUNDS] [RATES] [OLD_TANDEM]
#   e.g. bench/multi_host.sh build/tandem 3 "1gbit 100mbit" /tmp/oldbuild/tandem
# (RATES "" skips the all-reduce tables)
set -eu
tandem=$(readlink -f "$1")
rounds=${2:-3}
rates=${3-1gbit 100mbit}
old_tandem=$(readlink -f "${4:-$1}")
netns="$(dirname "$(readlink -f "$0")")/../scripts/netns-hosts.sh"
export TANDEM_NETNS_PREFIX=tandem-bench
work=$(mktemp -d)
trap '"$netns" down; rm -rf "$work"' EXIT
"$netns" up 2
if [ $# -ge 4 ]; then old=""; else old="--mca mpi_yield_when_idle 0"; fi
for rate in $rates; do
  "$netns" shape "$rate"
  echo "== all-reduce, 2 hosts, data links at $rate"
  # The previous path only up to 16 MiB: at 100 Mbit/s it takes minutes more.
  # shellcheck disable=SC2086
  "$netns" mpirun -np 2 $old "$old_tandem" bench allreduce --backend mpi \
    --min-bytes 1M --max-bytes 16M --repeats 3 | sed 's/^/old /'
  "$netns" mpirun -np 2 "$tandem" bench allreduce --backend mpi \
    --min-bytes 1M --max-bytes 256M --repeats 3 | sed 's/^/new /'
done
"$netns" shape 1gbit
echo "== mlp, --wire bf16, 2 hosts at 1 Gbit/s: examples/s (19,200 examples a run)"
for devices in 1 2; do
  for r in $(seq 1 "$rounds"); do
    for turn in 1 2; do
      if [ $(((r + turn) % 2)) -eq 0 ]; then
        name=old flags=$old bin=$old_tandem
      else
        name=new flags="" bin=$tandem
      fi
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH=$(dirname "$bin") "$netns" mpirun -np 2 $flags -x LD_LIBRARY_PATH "$bin" train --strategy multi-worker --devices $devices \
        --allow-oversubscription --model mlp --wire bf16 --epochs 1 --train-examples 19200 \
        --test-examples 100 --quiet --output "$work/$name" >/dev/null
      python3 -c "import json,sys; print(sys.argv[1], 'devices', sys.argv[2], round(json.load(open(sys.argv[3]))['examples_per_second']))" \
        "$name" "$devices" "$work/$name/summary.json"
      rm -rf "$work/$name"
    done
  done
done
