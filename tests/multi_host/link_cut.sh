#!/bin/sh
# A link cut in the middle of a multi-worker training across two namespace
# hosts: within 30 s every process on both hosts ends (ranks, mpirun,
# OpenMPI's daemons), mpirun with a non-zero status and an error naming the
# host that was cut off.
#   all:  both of h1's links (data and management) go down: mpirun's own
#         keepalive finds the host lost, before tandem's peer timeout.
#   data: only h1's data link goes down; mpirun still reaches it, so tandem
#         must find it: each rank names the other's host, and the job ends.
# usage: link_cut.sh all|data NETNS_SCRIPT TANDEM
set -u
mode=$1
netns=$2
tandem=$3
prefix=${TANDEM_NETNS_PREFIX:-tandem}
work=$(mktemp -d)
trap '"$netns" restore h1 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "link_cut: $*" >&2
  echo "--- job output:" >&2
  tail -c 4000 "$work/log" >&2
  exit 1
}
running() {  # the processes on both hosts
  for host in h0 h1; do
    ip netns pids "$prefix-$host" 2>/dev/null
  done | xargs -r ps -o pid=,args= -p
}
"$netns" mpirun -np 2 "$tandem" train --strategy multi-worker --devices 1 --model mlp \
  --epochs 100 --peer-timeout 3 --quiet --output "$work/run" >"$work/log" 2>&1 &
job=$!
# Cut once training runs: the metrics file appears at the first step.
i=0
until [ -s "$work/run/metrics.jsonl" ] || [ $i -ge 600 ]; do
  kill -0 $job 2>/dev/null || fail "the job ended before the cut"
  sleep 0.1
  i=$((i + 1))
done
[ $i -lt 600 ] || fail "training did not start within 60 s"
sleep 1
if [ "$mode" = data ]; then "$netns" cut h1 data; else "$netns" cut h1; fi
cut=$(date +%s)
while [ -n "$(running)" ] && [ $(($(date +%s) - cut)) -le 40 ]; do sleep 0.2; done
elapsed=$(($(date +%s) - cut))
left=$(running)
[ -z "$left" ] || fail "still running $elapsed s after the cut: $left"
wait $job
status=$?
echo "link_cut: every process ended $elapsed s after the cut; mpirun's status $status"
[ $status -ne 0 ] || fail "the job succeeded although h1 was cut off"
[ $elapsed -le 30 ] || fail "the job took $elapsed s (> 30 s) to end after the cut"
if [ "$mode" = data ]; then
  grep -q "error on rank 0: host h1 unreachable: rank 1 (pid [0-9]* on host h1)" "$work/log" ||
    fail "rank 0 did not report host h1 unreachable"
  grep -q "error on rank 1: host h0 unreachable: rank 0 (pid [0-9]* on host h0)" "$work/log" ||
    fail "rank 1 did not report host h0 unreachable"
else
  grep -qE "host h1 unreachable|lost communication with a remote daemon|Remote daemon: .* on node h1" "$work/log" ||
    fail "no error names host h1"
  grep -q "h1" "$work/log" || fail "no error names host h1"
fi
tail -c 1500 "$work/log"
