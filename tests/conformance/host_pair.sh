# Sourced by the two-host conformance scripts: two "hosts" (network namespaces
# $a and $b) joined by a veth pair, $a at $1.1/24 and $b at $1.2/24, a scratch
# directory $out, and everything removed on exit. Needs root (ip netns).
#   a=NAME b=NAME; source host_pair.sh 10.213.9
out=$(mktemp -d /tmp/host_pair.XXXXXX)
host_pair_cleanup() {
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$out"
}
trap host_pair_cleanup EXIT
ip netns del "$a" 2>/dev/null || true
ip netns del "$b" 2>/dev/null || true
ip netns add "$a"
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
ip -n "$a" addr add "$1.1/24" dev "v$a"
ip -n "$b" addr add "$1.2/24" dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "v$a" up
ip -n "$b" link set "v$b" up
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
