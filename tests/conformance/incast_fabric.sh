#!/usr/bin/env bash
# Issue 28, congestion: three sender hosts into one receiver host through a
# shallow-buffered bottleneck that marks ECN (tests/conformance/fabric_router.sh:
# a softrdma-fabric-switch port of 400 Mbit/s, 128 KiB, CE above 32 KiB). Each
# sender runs the traffic node (tests/support/traffic) against a server of its own
# on the receiver, all at once, every RC operation with every byte and completion
# checked, nothing set but the defaults (DCQCN). The switch must have marked
# packets, the receiver answered them with CNPs and every sender received CNPs
# (docs/decisions/congestion-control.md). Figures: bench/incast.sh. Needs root.
#   incast_fabric.sh SOFTRDMA_TOOL TRAFFIC_NODE FABRIC_SWITCH PORT_BASE
set -euo pipefail
tool=$1
node=$2
fabric_switch=$3
port=$(($4 + 40))
fabric_prefix="in${4}"
source "$(dirname "${BASH_SOURCE[0]}")/fabric_router.sh" 10.213.70 3
# A command that fails ends the test (set -e): say which, with what the nodes and
# the switch printed so far, before the EXIT trap deletes it (a CI run once failed
# here in 5.6 s with no output at all).
set -E
on_error() {
  echo "FAIL: line $1: \"$2\" exited $3; the logs so far:"
  for f in "$out"/*; do echo "== ${f##*/}"; tail -n 20 "$f"; done
}
trap 'on_error $LINENO "$BASH_COMMAND" $?' ERR
start_switch --rate-mbit 400 --buffer-kb 128 --mark-kb 32
# DCQCN alone: this test checks the marks-to-CNPs loop, and the delay control (on
# by default) keeps the queue short enough that a flow may see no mark at all.
run_node() {  # run_node HOST ROLE ARGS...: the node under `softrdma run`
  local host=$1
  shift
  ip netns exec "$host" env -u SOFTRDMA_ADDR -u SOFTRDMA_SHARE_ADDRESS SOFTRDMA_CONGESTION=dcqcn \
    timeout 150 "$tool" run -- "$node" --mode=test --mtu=1024 --scale=0.1 \
    --softrdma="$tool" "$@"
}
servers=()
for i in 1 2 3; do
  run_node "$receiver" --role=server --listen=$((port + i)) > "$out/server$i" 2>&1 &
  servers+=($!)
done
for i in 1 2 3; do  # each client connects once its server listens (its TCP channel)
  for ((t = 0; t < 600; ++t)); do
    ip netns exec "$receiver" ss -ltn "sport = :$((port + i))" | grep -q LISTEN && break
    kill -0 "${servers[$((i - 1))]}" 2> /dev/null || break
    sleep 0.05
  done
done
clients=()
for i in 1 2 3; do
  run_node "${senders[$((i - 1))]}" --role=client --connect="${addr[$receiver]}:$((port + i))" \
    > "$out/client$i" 2>&1 &
  clients+=($!)
done
status=0
for pid in "${clients[@]}" "${servers[@]}"; do wait "$pid" || status=1; done
stats=$(switch_stats) || stats="the switch printed no statistics"
for i in 1 2 3; do cat "$out/server$i" "$out/client$i"; done
echo "$stats"
fail() {
  echo "FAIL: $*"
  exit 1
}
((status == 0)) || fail "a node exited non-zero"
# counter FILE ROLE NAME: its value in the node's "engine counters" line (0 if absent).
counter() {
  sed -n "s/^\[$2\] engine counters:.* $3=\([0-9]*\).*/\1/p" "$1" | head -1 | grep . || echo 0
}
for i in 1 2 3; do
  grep -q "^\[server\] errors 0; verified [1-9]" "$out/server$i" || fail "server $i: errors, or nothing verified"
  grep -q "^\[client\] errors 0; verified [1-9]" "$out/client$i" || fail "client $i: errors, or nothing verified"
  received=$(counter "$out/client$i" client cnps_received)
  sent=$(counter "$out/server$i" server cnps_sent)
  echo "flow $i: the receiver sent $sent CNPs, the sender received $received"
  ((received > 0)) || fail "sender $i received no CNP"
done
marked=$(sed -n 's/.* marked \([0-9]*\) .*/\1/p' <<< "$stats")
((${marked:-0} > 0)) || fail "the switch marked nothing ($stats)"
echo PASS
