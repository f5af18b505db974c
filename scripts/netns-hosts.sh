#!/bin/sh
# Test hosts on one machine: H network namespaces ("hosts" h0 .. hH-1), each
# with two links to a switch (two bridges in a namespace of its own), like a
# cluster's two networks: "eth0", the data network (10.213.0.0/16, host i at
# .(i+1)), which the ranks' MPI traffic uses, and "eth1", the management
# network (10.214.0.0/16), which mpirun's control traffic uses. Traffic
# between hosts crosses two links, never shared memory or loopback; data
# links can be rate-limited (tc tbf, both directions) and delayed (this
# kernel has no netem: a forwarder of the project's own, link-delay, sits in
# each data link), and either network cut. Every process started through
# `exec`, `agent` or `mpirun` sees its host's name as its hostname (own UTS
# namespace) and the others' names in /etc/hosts, so OpenMPI treats the
# hosts as separate nodes.
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2. docs/multi_host.md.
#
#   netns-hosts.sh up [HOSTS] [RATE] [DELAY]
#                                     create HOSTS (default 2) hosts, data links at
#                                     RATE (tc units: 1gbit, 100mbit; default:
#                                     unshaped) and DELAY (as below; default none)
#   netns-hosts.sh down               remove them, killing whatever runs inside
#   netns-hosts.sh shape RATE|none    change every data link's rate
#   netns-hosts.sh delay TIME|none    delay every data link by TIME each way (500us,
#                                     5ms, 1s), so host to host by twice TIME and a
#                                     round trip by four times; needs the link-delay
#                                     program (TANDEM_LINK_DELAY, on PATH, or
#                                     build/tests/link-delay)
#   netns-hosts.sh cut HOST [data]    take HOST's links down (pulled cables), or
#                                     only its data link
#   netns-hosts.sh restore HOST       bring them back
#   netns-hosts.sh exec HOST CMD...   run CMD on HOST
#   netns-hosts.sh agent HOST CMD     OpenMPI's plm_rsh_agent (launches orted)
#   netns-hosts.sh mpirun ARGS...     mpirun on h0 over every host, tcp only,
#                                     ranks placed round-robin by host, with the
#                                     settings docs/multi_host.md recommends
#   netns-hosts.sh check              exit 0 if hosts can be made here, 77 if not
#   netns-hosts.sh status             list the hosts and their links
#
# TANDEM_NETNS_PREFIX (default "tandem") names the namespaces (PREFIX-h0,
# PREFIX-switch), so that separate sets do not collide.
set -eu

prefix=${TANDEM_NETNS_PREFIX:-tandem}
switch="$prefix-switch"
self=$(readlink -f "$0")

die() {
  echo "netns-hosts: $*" >&2
  exit 1
}

hosts() {
  ip netns list 2>/dev/null | sed -n "s/^$prefix-\(h[0-9][0-9]*\)\( .*\)\{0,1\}$/\1/p" | sort -V
}

host_count() {
  hosts | wc -l
}

known_host() {
  hosts | grep -qx "$1" || die "no host '$1' (hosts: $(hosts | tr '\n' ' ')); create them with: $0 up"
}

# tbf on one device: RATE, or none to remove the limit.
shape_device() {  # NAMESPACE DEVICE RATE
  ip -n "$1" link set "$2" down 2>/dev/null || true
  if [ "$3" = none ]; then
    ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
  else
    # A burst of 256 KiB lets TCP's bursts through at 100 Mbit/s and
    # above without drops; 100 ms of queue before tail drop.
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst 256kb latency 100ms ||
      die "tc refused rate '$3' (use tc units, e.g. 1gbit, 100mbit)"
  fi
  ip -n "$1" link set "$2" up
}

shape() {  # RATE
  for h in $(hosts); do
    shape_device "$prefix-$h" eth0 "$1"
    shape_device "$switch" "$h" "$1"
  done
}

# The link-delay program (tests/multi_host/link_delay.cc).
link_delay_program() {
  for candidate in "${TANDEM_LINK_DELAY:-}" "$(command -v link-delay || true)" \
    "$(dirname "$self")/../build/tests/link-delay"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  die "no link-delay program: build the link_delay target (cmake --build build --target link_delay), or set TANDEM_LINK_DELAY to its path"
}

# TIME (500us, 5ms, 1s) in microseconds.
microseconds() {
  case $1 in
    *us) n=${1%us} factor=1 ;;
    *ms) n=${1%ms} factor=1000 ;;
    *s) n=${1%s} factor=1000000 ;;
    *) n="" ;;
  esac
  case $n in '' | *[!0-9]*) die "delay must be a whole number with us, ms or s (500us, 5ms), or none; got '$1'" ;; esac
  us=$((n * factor))
  [ "$us" -le 10000000 ] || die "delay must be at most 10s, got '$1'"
  echo "$us"
}

# In the switch, data port hI normally sits on the bridge. Delayed, it is
# joined instead by link-delay to fI, whose veth peer dI sits on the bridge.
delay() {  # TIME|none
  [ "$1" = none ] || { us=$(microseconds "$1"); program=$(link_delay_program); }
  mkdir -p /run/tandem-netns
  for h in $(hosts); do
    i=${h#h}
    pidfile="/run/tandem-netns/$prefix-$h.delay"
    if [ -f "$pidfile" ]; then
      read -r pid _ <"$pidfile"
      kill "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    fi
    ip -n "$switch" link del "d$i" 2>/dev/null || true
    if [ "$1" = none ]; then
      ip -n "$switch" link set "$h" master data
      continue
    fi
    ip -n "$switch" link set "$h" nomaster
    ip -n "$switch" link add "d$i" type veth peer name "f$i"
    ip -n "$switch" link set "d$i" master data
    ip -n "$switch" link set "d$i" up
    ip -n "$switch" link set "f$i" up
    ip netns exec "$switch" "$program" "$h" "f$i" "$us" </dev/null >/dev/null 2>"${pidfile}.log" &
    echo "$! $us" >"$pidfile"
  done
  [ "$1" = none ] && return
  sleep 0.2
  for h in $(hosts); do
    read -r pid _ <"/run/tandem-netns/$prefix-$h.delay"
    kill -0 "$pid" 2>/dev/null ||
      die "link-delay did not start on $h's data link ($program $h f${h#h} $us)"
  done
}

check() {
  [ "$(id -u)" -eq 0 ] || { echo "netns-hosts: needs root" >&2; exit 77; }
  command -v ip >/dev/null && command -v tc >/dev/null ||
    { echo "netns-hosts: needs iproute2 (ip, tc)" >&2; exit 77; }
  # The probe runs in a mount namespace of its own: where it fails half-way
  # (a chroot, a container), the mount `ip netns add` makes of /run/netns
  # must not be left behind.
  probe="$prefix-probe$$"
  ok=0
  unshare --mount sh -c "ip netns add $probe && ip netns exec $probe unshare --uts true" \
    >/dev/null 2>&1 || ok=1
  rm -f "/run/netns/$probe"  # the file stays; its mount went with the namespace
  if [ $ok -ne 0 ]; then
    echo "netns-hosts: cannot create network and UTS namespaces here (a container?)" >&2
    exit 77
  fi
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(h[0-9]+|switch)$" || true); do
    # Whatever still runs there (a hung rank, mpirun) goes first.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -f "/run/tandem-netns/$prefix.hostfile" /run/tandem-netns/"$prefix"-h*.delay
}

up() {  # HOSTS RATE DELAY
  count=$1
  case $count in '' | *[!0-9]*) die "HOSTS must be a number from 2 to 200, got '$count'" ;; esac
  [ "$count" -ge 2 ] && [ "$count" -le 200 ] || die "HOSTS must be a number from 2 to 200, got '$count'"
  check
  down
  trap 'down' EXIT  # a failure half-way leaves nothing behind
  ip netns add "$switch"
  for bridge in data mgmt; do
    ip -n "$switch" link add "$bridge" type bridge
    ip -n "$switch" link set "$bridge" up
  done
  names=""
  i=0
  while [ $i -lt "$count" ]; do
    names="${names}10.213.$((i / 250)).$((i % 250 + 1)) h$i
"
    i=$((i + 1))
  done
  i=0
  while [ $i -lt "$count" ]; do
    ns="$prefix-h$i"
    ip netns add "$ns"
    for net in 0 1; do
      # Temporary names in the root namespace, unique to this call; in the
      # switch, data link "hI" and management link "mI".
      ip link add "tdh$$x$i" type veth peer name "tds$$x$i"
      ip link set "tdh$$x$i" netns "$ns"
      ip link set "tds$$x$i" netns "$switch"
      ip -n "$ns" link set "tdh$$x$i" name "eth$net"
      if [ $net -eq 0 ]; then port="h$i" bridge=data; else port="m$i" bridge=mgmt; fi
      ip -n "$switch" link set "tds$$x$i" name "$port"
      ip -n "$switch" link set "$port" master "$bridge"
      ip -n "$switch" link set "$port" up
      ip -n "$ns" addr add "10.$((213 + net)).$((i / 250)).$((i % 250 + 1))/16" dev "eth$net"
      ip -n "$ns" link set "eth$net" up
    done
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n%s' "$names" >"/etc/netns/$ns/hosts"
    i=$((i + 1))
  done
  [ "$2" = none ] || shape "$2"
  [ "$3" = none ] || delay "$3"
  trap - EXIT
}

# The arguments as one shell command line, each quoted.
quoted() {
  for arg in "$@"; do
    printf " '%s'" "$(printf '%s' "$arg" | sed "s/'/'\\\\''/g")"
  done
}

# Runs CMD (one shell command line) on HOST with HOST as its hostname.
on_host() {  # HOST CMD
  known_host "$1"
  exec ip netns exec "$prefix-$1" unshare --uts sh -c "hostname $1 && $2"
}

command=${1:-}
[ $# -eq 0 ] || shift
case $command in
  up) up "${1:-2}" "${2:-none}" "${3:-none}" ;;
  down) down ;;
  check) check ;;
  shape)
    [ $# -eq 1 ] || die "usage: $0 shape RATE|none"
    [ "$(host_count)" -gt 0 ] || die "no hosts; create them with: $0 up"
    shape "$1"
    ;;
  delay)
    [ $# -eq 1 ] || die "usage: $0 delay TIME|none"
    [ "$(host_count)" -gt 0 ] || die "no hosts; create them with: $0 up"
    delay "$1"
    ;;
  cut | restore)
    [ $# -ge 1 ] && [ $# -le 2 ] && [ "${2:-data}" = data ] || die "usage: $0 cut HOST [data] | restore HOST"
    known_host "$1"
    if [ "$command" = cut ]; then state=down; else state=up; fi
    ip -n "$switch" link set "$1" "$state"
    if [ $# -eq 1 ]; then ip -n "$switch" link set "m${1#h}" "$state"; fi
    ;;
  exec)
    [ $# -ge 2 ] || die "usage: $0 exec HOST CMD..."
    host=$1
    shift
    on_host "$host" "$(quoted "$@")"
    ;;
  agent)
    # OpenMPI calls AGENT [options] HOST COMMAND...; options (ssh's -x) are ignored.
    while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
    [ $# -ge 2 ] || die "usage: $0 agent HOST CMD"
    host=$1
    shift
    on_host "$host" "$*"
    ;;
  mpirun)
    [ "$(host_count)" -gt 0 ] || die "no hosts; create them with: $0 up"
    mkdir -p "/run/tandem-netns"
    hostfile="/run/tandem-netns/$prefix.hostfile"
    hosts | sed 's/$/ slots=64/' >"$hostfile"
    # --bind-to none: the hosts share this machine's cores, and each host's
    # daemon would bind its first rank to the same first core.
    line="mpirun --allow-run-as-root --hostfile $hostfile --map-by node --bind-to none"
    line="$line --mca plm_rsh_agent '$self agent' --mca btl tcp,self"
    line="$line --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth1"
    # A host that becomes unreachable ends the job within about 15 s, not
    # minutes (docs/multi_host.md).
    line="$line --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2"
    line="$line --mca oob_tcp_keepalive_probes 3$(quoted "$@")"
    export TANDEM_NETNS_PREFIX="$prefix"
    on_host h0 "$line"
    ;;
  status)
    for h in $(hosts); do
      rate=$(ip netns exec "$prefix-$h" tc qdisc show dev eth0 | sed -n 's/.*tbf.*rate \([^ ]*\).*/\1/p')
      data=$(ip -n "$switch" -br link show "$h" | awk '{print $2}')
      mgmt=$(ip -n "$switch" -br link show "m${h#h}" | awk '{print $2}')
      delayed=""
      if [ -f "/run/tandem-netns/$prefix-$h.delay" ]; then
        read -r pid us <"/run/tandem-netns/$prefix-$h.delay"
        delayed=" delay ${us}us (link-delay pid $pid)"
      fi
      echo "$h data $(ip -n "$prefix-$h" -br -4 addr show eth0 | awk '{print $3}') ${data:-?}" \
        "rate ${rate:-unshaped}${delayed}, management $(ip -n "$prefix-$h" -br -4 addr show eth1 | awk '{print $3}') ${mgmt:-?}"
    done
    ;;
  *)
    sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
