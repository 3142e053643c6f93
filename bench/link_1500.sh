#!/usr/bin/env bash
# RoCEv2 across a 1500-byte link beside the floor of the same link (issue 29).
#
# Two "hosts" (network namespaces) joined by a veth pair of MTU 1500 with its
# offloads off, as the loss bed has it (bench/lossy_fabric.sh): every packet
# crosses as a frame of its own, as on an Ethernet link, so GSO sends are cut in
# the sender's kernel and nothing joins them again before the socket. Each host on
# a core of its own. In each round, alternated:
#   floor     udp_floor stream, UDP_SEGMENT sends of 1040-byte datagrams (what a
#             RoCEv2 WRITE packet of RoCE MTU 1024 is: BTH, 1024 bytes, ICRC),
#             received with recvmmsg: the best a plain program gets on this link
#   roce      softrdma ib_write_bw -R, 64 KiB messages, RoCE MTU 1024 (-m 1024)
#   roce-tcp  the same without -R (perftest's TCP exchange, no CM: go-back-N)
#   iwarp     softrdma ib_write_bw -R over iWARP (TCP), for comparison
# Payload goodput in MB/s (10^6 bytes; perftest's unit); medians of the rounds,
# and each row's ratio to the floor (the median of the rounds' ratios).
#
#   bench/link_1500.sh [BUILD_DIR] [DURATION] [ROUNDS]   (defaults: build 10 3)
# Needs root (ip netns). LINK_WIRES chooses the softrdma rows (default "roce
# roce-tcp iwarp"); LINK_FLOOR_SEGMENTS="16 32" adds floor rows whose GSO sends
# carry at most that many datagrams (what a sender of shorter runs pays per
# datagram; docs/decisions/wire-speed.md), each against the full floor.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build}
duration=${2:-10}
rounds=${3:-3}
tool=$build/tools/softrdma
floor=$build/bench/udp_floor
gate=$build/tests/conformance/libconnect_gate.so
[[ -x $tool && -x $floor && -f $gate ]] ||
  { echo "build $build first (softrdma, udp_floor, connect_gate)" >&2; exit 2; }
read -r -a wires <<< "${LINK_WIRES:-roce roce-tcp iwarp}"
read -r -a floor_segments <<< "${LINK_FLOOR_SEGMENTS:-}"

a=lka$$ b=lkb$$
source "$here/tests/conformance/host_pair.sh" 10.213.31
source "$here/bench/figures.sh"
for ns in "$a" "$b"; do
  ip netns exec "$ns" ethtool -K "v$ns" tso off gso off gro off tx-udp-segmentation off >/dev/null
done
server_addr=10.213.31.1
pin_server=() pin_client=()
if (( $(nproc) >= 2 )); then pin_server=(taskset -c 0) pin_client=(taskset -c 1); fi

# bound HOST u|t PORT: waits (10 s at most) until a socket of HOST has PORT
# (UDP bound, TCP listening).
bound() {
  for _ in $(seq 200); do
    [[ -n $(ip netns exec "$1" ss -H"$2"ln "sport = :$3") ]] && return 0
    sleep 0.05
  done
}

# floor_run PORT [SEGMENTS]: MB/s of payload, or "fail".
floor_run() {
  ip netns exec "$a" timeout $((duration + 20)) "${pin_server[@]}" "$floor" stream server \
    "$server_addr" "$1" gso > "$out/floor" 2>&1 &
  local server=$!
  bound "$a" u "$1"  # a datagram before that would be lost
  ip netns exec "$b" timeout $((duration + 20)) "${pin_client[@]}" "$floor" stream client \
    "$server_addr" "$1" gso "$duration" 1040 ${2:+"$2"} || true
  wait "$server" || true
  awk '$1 == "gbps" { printf "%.0f\n", $2 * 1000 / 8; found = 1 } END { if (!found) print "fail" }' \
    "$out/floor"
}

# softrdma_run WIRE PORT: ib_write_bw's average MB/s, or "fail". roce and iwarp
# connect through rdma_cm (-R; RoCEv2 then agrees on selective repeat through the
# CM's ECE), roce-tcp through perftest's own TCP exchange (no CM: go-back-N).
softrdma_run() {
  local wire=${1%-tcp} port=$2
  local args=(-D "$duration" -s 65536 -m 1024 -p "$port") preload=()
  if [[ $1 != *-tcp ]]; then
    # perftest -R connects twice; the gate (tests/peer-vm/connect_gate.c) marks
    # each rdma_listen of the server and holds the client's N-th connect until
    # the N-th (as bench/lossy_fabric.sh).
    args+=(-R)
    preload=(sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$gate")
  fi
  local mark
  mark=$(mktemp -u "$out/listen.XXXXXX")
  ip netns exec "$a" env -u SOFTRDMA_ADDR SOFTRDMA_WIRE="$wire" CONNECT_GATE_MARK="$mark" \
    timeout $((duration + 40)) "${pin_server[@]}" "$tool" run -- "${preload[@]}" \
    ib_write_bw "${args[@]}" > "$out/server" 2>&1 &
  local server=$!
  # Without the CM, perftest's client connects its TCP socket once.
  [[ $1 == *-tcp ]] && bound "$a" t "$port"
  ip netns exec "$b" env -u SOFTRDMA_ADDR SOFTRDMA_WIRE="$wire" PEERVM_CONNECT_GATE="$mark" \
    PEERVM_CONNECT_GATE_SECONDS=30 timeout $((duration + 40)) "${pin_client[@]}" "$tool" run -- \
    "${preload[@]}" ib_write_bw "${args[@]}" "$server_addr" > "$out/client" 2>&1 || true
  wait "$server" || true
  if ! grep -q '^ 65536 ' "$out/client"; then
    { echo "== $1 port $port: no result; client and server said:"
      tail -6 "$out/client"; tail -6 "$out/server"; } >&2
  fi
  awk '$1 == 65536 { print $4; found = 1 } END { if (!found) print "fail" }' "$out/client"
}


echo "# link_1500: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), ${duration} s x ${rounds} rounds, veth MTU 1500 offloads off, RoCE MTU 1024"
declare -A figures=()
port=19000
for ((r = 0; r < rounds; ++r)); do
  port=$((port + 1))
  figures[floor]+="$(floor_run "$port") "
  for n in "${floor_segments[@]}"; do
    port=$((port + 1))
    figures[floor-$n]+="$(floor_run "$port" "$n") "
  done
  for wire in "${wires[@]}"; do
    port=$((port + 1))
    figures[$wire]+="$(softrdma_run "$wire" "$port") "
  done
done
read -r -a floors <<< "${figures[floor]}"
echo "| row | MB/s (median) | against the floor |"
echo "|---|---:|---:|"
echo "| floor: UDP 1040 B datagrams, GSO sends | $(median "${floors[@]}") | 1 |"
# row LABEL KEY: the median of KEY's runs and of their ratios to the same rounds' floor.
row() {
  local -a runs
  read -r -a runs <<< "${figures[$2]}"
  echo "| $1 | $(median "${runs[@]}") | $(per_round_ratio "${figures[$2]}" "${figures[floor]}") |"
}
for n in "${floor_segments[@]}"; do row "floor, at most $n datagrams per GSO send" "floor-$n"; done
for wire in "${wires[@]}"; do row "softrdma $wire ib_write_bw 64 KiB" "$wire"; done
keys=(floor)
for n in "${floor_segments[@]}"; do keys+=("floor-$n"); done
for key in "${keys[@]}" "${wires[@]}"; do echo "# $key: ${figures[$key]}MB/s"; done
