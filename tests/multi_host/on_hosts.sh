#!/bin/sh
# Runs CMD when the namespace hosts of TANDEM_NETNS_PREFIX exist (the CTest
# fixture multi_host made them); exits 77 (CTest: skipped) when they do not,
# because this machine cannot make them (not root, no namespaces).
# usage: on_hosts.sh NETNS_SCRIPT CMD...
set -eu
netns=$1
shift
if [ -z "$("$netns" status 2>/dev/null)" ]; then
  echo "on_hosts: no namespace hosts (the fixture could not make them here): skipped" >&2
  exit 77
fi
exec "$@"
