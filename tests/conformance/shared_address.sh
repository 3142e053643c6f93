#!/usr/bin/env bash
# Issue 27 (docs/decisions/host-rnic.md): three ibv_rc_pingpong servers at once on
# one host's one address (SOFTRDMA_SHARE_ADDRESS=1), each reached by a client on
# another host (network namespaces joined by a veth pair), all at once; the three
# clients share their host's one address too. Each
# server's QPs are in a QPN block of its own, which the clients print and this
# checks, with every client's and server's run. Meanwhile a fourth pair runs on the
# server host itself, both ends on its one address: it must take the same-host
# path (`softrdma status` shows both QPs on "path host") and check its data (-c);
# and a fifth on a second address of that host, over UDP with
# SOFTRDMA_SHARE_ADDRESS=crossed: every packet lands at the other process and is
# handed over (both count udp.rx_handed_over), its data checked too.
# Needs root (ip netns).
#   shared_address.sh SOFTRDMA_TOOL TAG    (TAG keeps names apart between builds)
set -euo pipefail
tool=$1
tag=$2
a=sha$tag b=shb$tag
source "$(dirname "${BASH_SOURCE[0]}")/host_pair.sh" 10.213.9
ports=(7401 7402 7403)
servers=()
for port in "${ports[@]}"; do
  ip netns exec "$a" env SOFTRDMA_ADDR=10.213.9.1 SOFTRDMA_SHARE_ADDRESS=1 timeout 90 \
    "$tool" run -- ibv_rc_pingpong -g 1 -p "$port" -n 500 > "$out/server.$port" 2>&1 &
  servers+=($!)
done
for port in "${ports[@]}"; do  # until each server listens for its client
  for _ in $(seq 1500); do
    ip netns exec "$a" ss -ltnH "sport = :$port" | grep -q . && break
    if ! kill -0 "${servers[0]}" 2>/dev/null; then break; fi
    sleep 0.02
  done
done
clients=()
for port in "${ports[@]}"; do
  ip netns exec "$b" env SOFTRDMA_ADDR=10.213.9.2 SOFTRDMA_SHARE_ADDRESS=1 timeout 60 "$tool" run -- \
    ibv_rc_pingpong -g 1 -p "$port" -n 500 10.213.9.1 > "$out/client.$port" 2>&1 &
  clients+=($!)
done
# start_pair NAME PORT ITERS ADDRESS ENV...: an ibv_rc_pingpong -c pair with both
# ends on ADDRESS of host a; sets pair_server and pair_client.
start_pair() {
  local name=$1 port=$2 iters=$3 address=$4
  shift 4
  local on=(ip netns exec "$a" env SOFTRDMA_ADDR="$address" "$@" timeout 90 "$tool" run --)
  "${on[@]}" ibv_rc_pingpong -g 1 -c -p "$port" -n "$iters" > "$out/server.$name" 2>&1 &
  pair_server=$!
  for _ in $(seq 1500); do
    ip netns exec "$a" ss -ltnH "sport = :$port" | grep -q . && break
    sleep 0.02
  done
  "${on[@]}" ibv_rc_pingpong -g 1 -c -p "$port" -n "$iters" "$address" > "$out/client.$name" 2>&1 &
  pair_client=$!
}
# count_while_running PID COMMAND...: COMMAND's number, read until it says 2 or PID
# ended (the event waited for: both processes of the pair seen).
count_while_running() {
  local pid=$1 count=0
  shift
  while kill -0 "$pid" 2>/dev/null; do
    count=$("$@")
    (( count >= 2 )) && break
    sleep 0.05
  done
  echo "$count"
}
# The pair on host a: both ends on 10.213.9.1; both QPs on the same-host path.
start_pair local 7404 100000 10.213.9.1 SOFTRDMA_SHARE_ADDRESS=1
local_server=$pair_server local_client=$pair_client
host_path_qps() {
  ip netns exec "$a" "$tool" status 2>/dev/null | grep -c 'peer ::ffff:10.213.9.1  path host' || true
}
host_qps=$(count_while_running "$local_client" host_path_qps)
# The crossed pair, on a second address of host a: both processes hand packets over.
ip -n "$a" addr add 10.213.9.11/24 dev "v$a"
start_pair crossed 7405 20000 10.213.9.11 SOFTRDMA_SHARE_ADDRESS=crossed SOFTRDMA_TRANSPORT=udp
crossed_server=$pair_server crossed_client=$pair_client
processes_handing_over() {
  ip netns exec "$a" "$tool" status 2>/dev/null |
    awk '/^process/ { mine = /10\.213\.9\.11:/ } mine && $1 == "udp.rx_handed_over" && $2 > 0' |
    wc -l
}
handed=$(count_while_running "$crossed_client" processes_handing_over)
status=0
for pid in "${clients[@]}" "${servers[@]}" "$local_client" "$local_server" "$crossed_client" \
           "$crossed_server"; do
  wait "$pid" || status=1
done
for pair in local:100000 crossed:20000; do
  for side in server client; do
    echo "== $side ${pair%:*}"; cat "$out/$side.${pair%:*}"
    grep -q "${pair#*:} iters in" "$out/$side.${pair%:*}" ||
      { echo "FAIL: ${pair%:*} $side did not finish"; status=1; }
  done
done
if (( handed < 2 )); then
  echo "FAIL: SOFTRDMA_SHARE_ADDRESS=crossed: $handed of the pair's 2 processes had packets handed over"
  status=1
fi
if (( host_qps < 2 )); then
  echo "FAIL: the pair on one shared address was not seen on the same-host path ($host_qps QPs)"
  status=1
fi
blocks=()
for port in "${ports[@]}"; do
  for side in server client; do
    echo "== $side $port"; cat "$out/$side.$port"
    grep -q "500 iters in" "$out/$side.$port" || { echo "FAIL: $side $port did not finish"; status=1; }
  done
  # The server's QPN, as its client printed it: "remote address: ... QPN 0x004000, ..."
  qpn=$(sed -n 's/.*remote address:.*QPN \(0x[0-9a-f]*\).*/\1/p' "$out/client.$port" | head -1)
  [[ -n $qpn ]] && blocks+=($(( qpn >> 14 )))
done
echo "server QPN blocks: ${blocks[*]}"
unique=$(printf '%s\n' "${blocks[@]}" | sort -u | grep -vc '^0$' || true)
if (( ${#blocks[@]} != 3 || unique != 3 )); then
  echo "FAIL: the servers' QPNs are not in three blocks of their own"
  status=1
fi
exit $status
