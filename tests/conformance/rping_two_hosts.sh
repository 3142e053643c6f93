#!/usr/bin/env bash
# Issue 8: rping across two "hosts" (network namespaces joined by a veth pair),
# each softrdma process on its interface's address (SOFTRDMA_ADDR): the client
# names the server's address, which is another host's, so its GID is the address
# itself (RoCEv2) and the CM MADs cross the veth. Needs root (ip netns).
#   rping_two_hosts.sh SOFTRDMA_TOOL TAG    (TAG keeps names apart between builds)
set -euo pipefail
tool=$1
tag=$2
a=sra$tag b=srb$tag
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add "$a"
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
ip -n "$a" addr add 10.213.7.1/24 dev "v$a"
ip -n "$b" addr add 10.213.7.2/24 dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "v$a" up
ip -n "$b" link set "v$b" up
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
ip netns exec "$a" env SOFTRDMA_ADDR=10.213.7.1 timeout 60 "$tool" run -- \
  rping -s -a 10.213.7.1 -p 7300 -C 5 -v > "/tmp/rping_two_hosts_$tag.server" 2>&1 &
server=$!
for _ in $(seq 500); do  # until the server holds its port in softrdma's librdmacm
  ip netns exec "$a" grep -q "@softrdma-rdmacm/106/7300/" /proc/net/unix && break
  sleep 0.02
done
client_status=0
client_out=$(ip netns exec "$b" env SOFTRDMA_ADDR=10.213.7.2 timeout 60 "$tool" run -- \
  rping -c -a 10.213.7.1 -p 7300 -C 5 -v 2>&1) || client_status=$?
server_status=0
wait "$server" || server_status=$?
echo "$client_out"
cat "/tmp/rping_two_hosts_$tag.server"
rm -f "/tmp/rping_two_hosts_$tag.server"
if [[ $client_status -ne 0 || $server_status -ne 0 ]]; then
  echo "rping across namespaces failed: client $client_status, server $server_status"
  exit 1
fi
grep -q "ping data: rdma-ping-4: " <<<"$client_out" || { echo "client missed pings"; exit 1; }
echo "rping across two namespaces: 5 pings"
