#!/usr/bin/env bash
# Issue 27 (docs/decisions/host-rnic.md): three ibv_rc_pingpong servers at once on
# one host's one address (SOFTRDMA_SHARE_ADDRESS=1), each reached by a client on
# another host (network namespaces joined by a veth pair), all at once; the three
# clients share their host's one address too. Each
# server's QPs are in a QPN block of its own, which the clients print and this
# checks, with every client's and server's run. Needs root (ip netns).
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
status=0
for pid in "${clients[@]}" "${servers[@]}"; do wait "$pid" || status=1; done
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
