#!/bin/sh
# The test hosts' link delay (scripts/netns-hosts.sh delay, the link-delay
# forwarder): with every data link delayed by 10 ms each way, a 4-byte
# all-reduce between the two hosts takes at least the 20 ms a message needs
# from host to host, and not much more than a round trip; multi-worker
# training runs across the delayed links to the end; and `delay none`
# restores the links (the all-reduce back under 5 ms).
# usage: link_delay.sh NETNS_SCRIPT TANDEM   (TANDEM_LINK_DELAY: the forwarder)
set -u
netns=$1
tandem=$2
work=$(mktemp -d)
trap '"$netns" delay none >/dev/null 2>&1; rm -rf "$work"' EXIT
fail() {
  echo "link_delay: $*" >&2
  [ -f "$work/log" ] && tail -c 4000 "$work/log" >&2
  [ -f "$work/stderr" ] && tail -c 4000 "$work/stderr" >&2
  exit 1
}
# The JSON alone in the log: Open MPI's warnings (a TCP connect retried
# while the links are delayed, say) go to stderr, and once broke the parse.
tiny_allreduce_us() {
  "$netns" mpirun -np 2 "$tandem" bench allreduce --backend mpi --min-bytes 4 --max-bytes 4 \
    --repeats 3 --json >"$work/log" 2>"$work/stderr" || fail "bench allreduce failed"
  python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['results'][0]['time_us']))" \
    "$work/log" || fail "no result"
}
"$netns" delay 10ms || fail "could not delay the links"
"$netns" status | grep -q "delay 10000us" || fail "status does not show the delay"
us=$(tiny_allreduce_us) || exit 1
echo "4-byte all-reduce with 10 ms per link: $us us"
[ "$us" -ge 20000 ] || fail "took $us us, less than the 20 ms from host to host"
[ "$us" -le 100000 ] || fail "took $us us, far more than a 40 ms round trip"
"$netns" mpirun -np 2 "$tandem" train --strategy multi-worker --devices 1 --model mlp \
  --epochs 1 --train-examples 1280 --test-examples 100 --quiet --output "$work/run" \
  >"$work/log" 2>&1 || fail "training across the delayed links failed"
[ -s "$work/run/summary.json" ] || fail "training wrote no summary"
"$netns" delay none || fail "could not remove the delay"
us=$(tiny_allreduce_us) || exit 1
echo "4-byte all-reduce after delay none: $us us"
[ "$us" -lt 5000 ] || fail "took $us us after the delay was removed"
echo "link_delay: ok"
