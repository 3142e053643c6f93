# Sourced by fabric_hosts.sh and fabric_router.sh: one "host" (a network namespace)
# on a bridge that lives in a namespace of its own.
#   fabric_bridge_host BRIDGE_NS PORT HOST ADDRESS/PREFIX
# makes HOST, a veth pair whose end PORT joins br0 in BRIDGE_NS and whose other end
# is HOST's eth0 with ADDRESS, both up, and HOST's loopback up. The pair is made in
# the bridge's namespace and one end moved (short names: IFNAMSIZ).
fabric_bridge_host() {
  local bridge_ns=$1 port=$2 host=$3 address=$4
  ip netns add "$host"
  ip -n "$bridge_ns" link add "$port" type veth peer name eth0 netns "$host"
  ip -n "$bridge_ns" link set "$port" master br0 up
  ip -n "$host" addr add "$address" dev eth0
  ip -n "$host" link set lo up
  ip -n "$host" link set eth0 up
}
