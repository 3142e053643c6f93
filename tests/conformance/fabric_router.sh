# Sourced by the congestion test bed's scripts (docs/decisions/fabric-switch.md):
# COUNT sender "hosts" (network namespaces) on a bridge, one receiver host, and a
# router namespace between them whose port toward the receiver is the bottleneck:
# every packet it forwards to the receiver passes softrdma-fabric-switch (NFQUEUE),
# a switch port of a given rate and buffer that drops what overflows and CE-marks
# ECN-capable packets above a queue threshold. The reverse direction (ACKs,
# CNPs) is not queued. Offloads off: every packet its own frame, as on a wire.
# Defines senders=(names), receiver, addr[name], $out, start_switch ARGS... and
# switch_stats; removes everything on exit. Needs root (ip netns, iptables).
#   fabric_prefix=NAME fabric_switch=PATH; source fabric_router.sh SUBNET COUNT
#   (SUBNET: 10.213.40 gives senders 10.213.40.1.., the receiver 10.213.41.1)
out=$(mktemp -d /tmp/fabric.XXXXXX)
router="${fabric_prefix}rt"
receiver="${fabric_prefix}rx"
senders=()
declare -A addr
subnet_tx=$1
subnet_rx=${1%.*}.$((${1##*.} + 1))
for ((i = 1; i <= $2; ++i)); do
  senders+=("${fabric_prefix}s$i")
  addr["${fabric_prefix}s$i"]="$subnet_tx.$i"
done
addr[$receiver]="$subnet_rx.1"
switch_pid=
fabric_router_cleanup() {
  if [[ -n $switch_pid ]]; then kill "$switch_pid" 2>/dev/null || true; wait "$switch_pid" 2>/dev/null || true; fi
  for ns in "${senders[@]}" "$receiver" "$router"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap 'fabric_router_cleanup; rm -rf "$out"' EXIT
fabric_router_cleanup  # left by a run that was killed
ip netns add "$router"
ip -n "$router" link set lo up
ip netns exec "$router" sysctl -qw net.ipv4.ip_forward=1
ip -n "$router" link add br0 type bridge
ip -n "$router" addr add "$subnet_tx.254/24" dev br0
ip -n "$router" link set br0 up
quiet_link() {  # NS DEV: no offloads, so that each packet is a frame of its own
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off tx-udp-segmentation off > /dev/null 2>&1 || true
}
source "$(dirname "${BASH_SOURCE[0]}")/fabric_bridge.sh"
for ((i = 1; i <= $2; ++i)); do
  host="${fabric_prefix}s$i"
  fabric_bridge_host "$router" "p$i" "$host" "${addr[$host]}/24"
  ip -n "$host" route add "$subnet_rx.0/24" via "$subnet_tx.254"
  quiet_link "$host" eth0
  quiet_link "$router" "p$i"
done
ip netns add "$receiver"
ip -n "$router" link add down0 type veth peer name eth0 netns "$receiver"
ip -n "$router" addr add "$subnet_rx.254/24" dev down0
ip -n "$router" link set down0 up
ip -n "$receiver" addr add "${addr[$receiver]}/24" dev eth0
ip -n "$receiver" link set lo up
ip -n "$receiver" link set eth0 up
ip -n "$receiver" route add "$subnet_tx.0/24" via "$subnet_rx.254"
quiet_link "$receiver" eth0
quiet_link "$router" down0
# start_switch ARGS...: the bottleneck (softrdma-fabric-switch's options).
start_switch() {
  ip netns exec "$router" iptables -A FORWARD -o down0 -j NFQUEUE --queue-num 0
  ip netns exec "$router" "$fabric_switch" --queue 0 "$@" > "$out/switch" 2>&1 &
  switch_pid=$!
  for _ in $(seq 500); do  # until it holds the queue (its first line)
    grep -q "^fabric-switch: queue" "$out/switch" && return 0
    kill -0 "$switch_pid" 2>/dev/null || break
    sleep 0.01
  done
  cat "$out/switch" >&2
  return 1
}
# switch_stats: stops the switch; its statistics line.
switch_stats() {
  kill "$switch_pid" 2>/dev/null || true
  wait "$switch_pid" 2>/dev/null || true
  switch_pid=
  grep "^fabric-switch: arrived" "$out/switch"
}
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
