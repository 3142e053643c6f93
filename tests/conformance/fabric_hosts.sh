# Sourced by the test-bed scripts: a fabric of "hosts" (network namespaces), each
# with one address, joined by a Linux bridge that lives in a namespace of its own
# (the switch), so nothing of the machine's own namespace is touched. Defines
# hosts=(names), addr[name]=its IPv4 address, a scratch directory $out, and
# removes everything on exit. Needs root (ip netns).
#   fabric_prefix=NAME; source fabric_hosts.sh SUBNET COUNT    (SUBNET: 10.213.15)
out=$(mktemp -d /tmp/fabric.XXXXXX)
switch="${fabric_prefix}sw"
hosts=()
declare -A addr
for ((i = 1; i <= $2; ++i)); do
  hosts+=("${fabric_prefix}h$i")
  addr["${fabric_prefix}h$i"]="$1.$i"
done
fabric_remove_namespaces() {
  for ns in "${hosts[@]}" "$switch"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap 'fabric_remove_namespaces; rm -rf "$out"' EXIT
fabric_remove_namespaces  # left by a run that was killed
ip netns add "$switch"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
source "$(dirname "${BASH_SOURCE[0]}")/fabric_bridge.sh"
for ((i = 1; i <= $2; ++i)); do
  host="${fabric_prefix}h$i"
  fabric_bridge_host "$switch" "p$i" "$host" "${addr[$host]}/24"
done
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
