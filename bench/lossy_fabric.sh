#!/usr/bin/env bash
# Goodput under random loss between two softrdma hosts (issue 28; docs/decisions/
# selective-repeat.md; the figures in docs/performance.md "Loss").
#
# Two "hosts" (network namespaces) joined by a veth pair with offloads off (every
# packet its own frame), RoCE MTU 1024. perftest over rdma_cm (-R) for each of
# WRITE, READ and SEND, for each wire:
#   roce-sr   RoCEv2, selective repeat (agreed through the CM's ECE, the default)
#   roce-gbn  RoCEv2, IBA's go-back-N (SOFTRDMA_SELECTIVE_REPEAT=off)
#   roce-sr-cc-X  selective repeat with SOFTRDMA_CONGESTION=X (off, dcqcn,
#             delay, dcqcn+delay: what the congestion control costs)
#   roce-sr-w-N   selective repeat with SOFTRDMA_WINDOW=N packets
#   roce-sr-t-N   selective repeat with SOFTRDMA_TARGET_DELAY_US=N
#   iwarp     iWARP over TCP (SOFTRDMA_WIRE=iwarp)
#   WIRE@DIR  any of these with the softrdma of another build (an older commit's:
#             two versions side by side in the same rounds)
# at each loss rate: iptables drops that share of the data direction's packets
# at the receiving host (the server for WRITE and SEND, the client for READ),
# packets of 1000 bytes and more only (data; not ACKs, TCP ACKs or CM MADs), the
# same rule for both wires. Each figure is the median of RUNS runs of DURATION
# seconds; a round runs every wire at every loss rate once, and each lossy
# figure's ratio is the median of its rounds' ratios to the same round's lossless
# run of its wire. Under the table: each wire's figure against the first wire's
# at the same loss (the median of the rounds' ratios), and every run's figure.
#
#   bench/lossy_fabric.sh [BUILD_DIR] [DURATION] [RUNS] [LOSSES...]
#   (defaults: build 10 3 0 0.01 0.05). Needs root (ip netns, iptables).
#   LOSSY_TESTS / LOSSY_WIRES choose the rows (default: the three tests over
#   roce-sr, roce-gbn and iwarp); LOSSY_HOGS=N runs N busy loops beside it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build}
duration=${2:-10}
runs=${3:-3}
shift $(($# < 3 ? $# : 3))
losses=("$@")
[[ ${#losses[@]} -eq 0 ]] && losses=(0 0.01 0.05)
tool=$build/tools/softrdma
gate=$build/tests/conformance/libconnect_gate.so
[[ -x $tool && -f $gate ]] || { echo "build $build first (softrdma, connect_gate)" >&2; exit 2; }

a=lfa$$ b=lfb$$
source "$here/tests/conformance/host_pair.sh" 10.213.28
source "$here/bench/figures.sh"
# Every packet its own frame, so that a drop takes one packet: without
# tx-udp-segmentation off a UDP GSO batch crosses the veth whole, and the rule
# below dropped a whole batch (about 13 packets) at once (found 2026-11-30).
for ns in "$a" "$b"; do
  ip netns exec "$ns" ethtool -K "v$ns" tso off gso off gro off tx-udp-segmentation off >/dev/null
done
server_addr=10.213.28.1
# LOSSY_HOGS=N: N busy loops beside the bed for the whole run (a loaded host, as a
# CI machine or a laptop running a build is; docs/decisions/congestion-control.md
# "Host delay"). Unpinned: the scheduler shares the cores among all.
hogs=()
for ((i = 0; i < ${LOSSY_HOGS:-0}; ++i)); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
trap '((${#hogs[@]} == 0)) || kill "${hogs[@]}" 2>/dev/null || true; host_pair_cleanup' EXIT
# Each host on a core of its own (LOSSY_PIN=0: wherever the scheduler puts
# them), as two machines are. Unpinned, lossless SEND runs of one build moved
# 320–550 MB/s in one table; pinned, 320–400 (2026-11-30, load ~1).
pin_server=() pin_client=()
if [[ ${LOSSY_PIN:-1} == 1 ]] && (( $(nproc) >= 2 )); then
  pin_server=(taskset -c 0) pin_client=(taskset -c 1)
fi

wire_env() {
  set -- "${1%@*}"  # the build aside
  case $1 in
    roce-sr) echo "SOFTRDMA_WIRE=roce" ;;
    roce-gbn) echo "SOFTRDMA_WIRE=roce SOFTRDMA_SELECTIVE_REPEAT=off" ;;
    roce-sr-cc-*) echo "SOFTRDMA_WIRE=roce SOFTRDMA_CONGESTION=${1#roce-sr-cc-}" ;;
    roce-sr-w-*) echo "SOFTRDMA_WIRE=roce SOFTRDMA_WINDOW=${1#roce-sr-w-}" ;;
    roce-sr-t-*) echo "SOFTRDMA_WIRE=roce SOFTRDMA_TARGET_DELAY_US=${1#roce-sr-t-}" ;;
    iwarp) echo "SOFTRDMA_WIRE=iwarp" ;;
  esac
}

# set_loss HOST WIRE P: HOST drops a share P of the data packets it receives.
set_loss() {
  ip netns exec "$1" iptables -F INPUT
  [[ $3 == 0 ]] && return
  local proto=(-p udp --dport 4791)
  [[ ${2%@*} == iwarp ]] && proto=(-p tcp)
  ip netns exec "$1" iptables -A INPUT "${proto[@]}" -m length --length 1000:65535 \
    -m statistic --mode random --probability "$3" -j DROP
}

# one_run WIRE TEST PORT: the client's average MB/s, or "fail".
one_run() {
  local wire=$1 test=$2 port=$3 tool=$tool
  [[ $wire == *@* ]] && tool=${wire#*@}/tools/softrdma
  local -a env_words
  read -r -a env_words <<< "$(wire_env "$wire")"
  local args=(-R -D "$duration" -s 65536 -m 1024 -p "$port")
  # perftest -R connects twice; the gate (tests/peer-vm/connect_gate.c) marks each
  # rdma_listen of the server and holds the client's N-th connect until the N-th.
  local mark
  mark=$(mktemp -u "$out/listen.XXXXXX")  # new for each run
  ip netns exec "$a" env -u SOFTRDMA_ADDR "${env_words[@]}" CONNECT_GATE_MARK="$mark" \
    timeout $((duration + 40)) "${pin_server[@]}" "$tool" run -- \
    sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$gate" \
    "$test" "${args[@]}" > "$out/server" 2>&1 &
  local server=$!
  ip netns exec "$b" env -u SOFTRDMA_ADDR "${env_words[@]}" PEERVM_CONNECT_GATE="$mark" \
    PEERVM_CONNECT_GATE_SECONDS=30 timeout $((duration + 40)) "${pin_client[@]}" "$tool" run -- \
    sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$gate" \
    "$test" "${args[@]}" "$server_addr" > "$out/client" 2>&1 || true
  wait "$server" || true
  if ! grep -q '^ 65536 ' "$out/client"; then
    { echo "== $wire $test port $port: no result; client and server said:"
      tail -4 "$out/client"; tail -4 "$out/server"; } >&2
  fi
  awk '$1 == 65536 { print $4; found = 1 } END { if (!found) print "fail" }' "$out/client"
}


echo "# lossy_fabric: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), ${duration} s x ${runs} runs, MTU 1024, 64 KiB messages, ${#hogs[@]} busy loops beside"
printf '| test | wire |'; for p in "${losses[@]}"; do printf ' %s %% |' "$(awk "BEGIN { print $p * 100 }")"; done; echo
printf '|---|---|'; for _ in "${losses[@]}"; do printf -- '---|'; done; echo
port=18000
runs_seen=()  # every run's figure, printed under the table
read -r -a tests <<< "${LOSSY_TESTS:-ib_write_bw ib_read_bw ib_send_bw}"
read -r -a wires <<< "${LOSSY_WIRES:-roce-sr roce-gbn iwarp}"
for wire in "${wires[@]}"; do
  [[ $wire != *@* || -x ${wire#*@}/tools/softrdma ]] ||
    { echo "$wire: no ${wire#*@}/tools/softrdma" >&2; exit 2; }
done
cross_wire=()  # each wire's figures against the first wire's (the rounds' median ratio)
for test in "${tests[@]}"; do
  receiver=$a
  [[ $test == ib_read_bw ]] && receiver=$b
  # Round by round, every wire and loss rate in each round: a ratio then compares
  # runs of the same minutes (this 2-core machine's rates drift by ±20 % between
  # minutes; all the lossless runs first made that drift part of the ratio, and
  # one wire's runs after another's made it part of a comparison of wires).
  declare -A figures=()
  for ((r = 0; r < runs; ++r)); do
    for wire in "${wires[@]}"; do
      for p in "${losses[@]}"; do
        set_loss "$receiver" "$wire" "$p"
        port=$((port + 1))
        figures[$wire|$p]+="$(one_run "$wire" "$test" "$port") "
      done
      set_loss "$receiver" "$wire" 0
    done
  done
  for wire in "${wires[@]}"; do
    row="| ${test#ib_} | $wire |"
    lossless=${figures[$wire|${losses[0]}]}
    for p in "${losses[@]}"; do
      read -r -a at_p <<< "${figures[$wire|$p]}"
      runs_seen+=("# ${test#ib_} $wire $p: ${at_p[*]} MB/s")
      m=$(median "${at_p[@]}")
      if [[ $p == "${losses[0]}" ]]; then
        row+=" $m MB/s |"
      elif [[ $m == fail ]]; then
        row+=" $m |"
      else
        row+=" $m MB/s ($(per_round_ratio "${figures[$wire|$p]}" "$lossless")x) |"
      fi
    done
    echo "$row"
    [[ $wire == "${wires[0]}" ]] && continue
    for p in "${losses[@]}"; do
      cross_wire+=("# ${test#ib_} $p: $wire / ${wires[0]} = $(per_round_ratio \
        "${figures[$wire|$p]}" "${figures[${wires[0]}|$p]}")x")
    done
  done
  unset figures
done
printf '%s\n' "${cross_wire[@]}"
printf '%s\n' "${runs_seen[@]}"
