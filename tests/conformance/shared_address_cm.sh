#!/usr/bin/env bash
# Issue 27 (docs/decisions/host-rnic.md, "CM MADs"): rdma_cm servers of several
# processes on one host's one address (SOFTRDMA_SHARE_ADDRESS=1), at once: two
# rping servers, a ucmatose server (several connections), a udaddy server (UD:
# SIDR_REQ and SIDR_REP) and perftest's ib_send_bw -R, each reached by a client
# of its own on another host whose processes share their address too. Every CM
# MAD reaches one socket of the address's group, whichever the kernel picks; the
# process that got it hands it to the listener's (by ServiceID) or the
# connection's (by the Communication ID it names). Needs root (ip netns).
#   shared_address_cm.sh SOFTRDMA_TOOL TAG CONNECT_GATE_SO
# perftest -R connects twice, the second time at once while its server is still
# between its two listens; the gate (tests/peer-vm/connect_gate.c), preloaded in
# both, holds that connect until the server's second rdma_listen has returned.
set -euo pipefail
tool=$1
tag=$2
gate=$3
a=scma$tag b=scmb$tag
source "$(dirname "${BASH_SOURCE[0]}")/host_pair.sh" 10.213.13
source "$(dirname "${BASH_SOURCE[0]}")/judge_pair.sh"
server_addr=10.213.13.1
on_a=(ip netns exec "$a" env SOFTRDMA_ADDR=$server_addr SOFTRDMA_SHARE_ADDRESS=1 timeout 90 "$tool" run --)
on_b=(ip netns exec "$b" env SOFTRDMA_ADDR=10.213.13.2 SOFTRDMA_SHARE_ADDRESS=1 timeout 60 "$tool" run --)
# name | server command | client command | what the client prints when it is done
cases=(
  "rping1|rping -s -a $server_addr -p 7421 -C 10 -v|rping -c -a $server_addr -p 7421 -C 10 -v|ping data: rdma-ping-9: "
  "rping2|rping -s -a $server_addr -p 7422 -C 10 -v|rping -c -a $server_addr -p 7422 -C 10 -v|ping data: rdma-ping-9: "
  "ucmatose|ucmatose -b $server_addr -p 7423 -c 3 -C 10|ucmatose -s $server_addr -p 7423 -c 3 -C 10|data transfers complete"
  "udaddy|udaddy -b $server_addr -c 2 -C 10|udaddy -s $server_addr -c 2 -C 10|data transfers complete"
  "ib_send_bw|ib_send_bw -R -p 7425 -n 200 -s 4096|ib_send_bw -R -p 7425 -n 200 -s 4096 $server_addr|4096 +200 "
)
declare -A server client
# preload VARIABLE=VALUE: the words that preload the gate with that setting,
# after whatever `softrdma run` preloads (the ASan runtime in a sanitizer build).
preload() {
  gated=(env "$1" sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$gate")
}
# Every server marks each rdma_listen that returned: $out/listen.NAME.N.
for entry in "${cases[@]}"; do
  IFS='|' read -r name server_command _ _ <<< "$entry"
  preload CONNECT_GATE_MARK="$out/listen.$name"
  # shellcheck disable=SC2086  # the commands are words
  "${on_a[@]}" "${gated[@]}" $server_command > "$out/server.$name" 2>&1 &
  server[$name]=$!
done
for entry in "${cases[@]}"; do  # until each server listens (or has ended)
  IFS='|' read -r name _ _ _ <<< "$entry"
  for _ in $(seq 3000); do
    [[ -e $out/listen.$name.1 ]] && break
    kill -0 "${server[$name]}" 2>/dev/null || break
    sleep 0.02
  done
done
for entry in "${cases[@]}"; do
  IFS='|' read -r name _ client_command _ <<< "$entry"
  gated=()
  # perftest -R's second connect waits for the server's second listen.
  [[ $name == ib_send_bw ]] && preload PEERVM_CONNECT_GATE="$out/listen.$name"
  # shellcheck disable=SC2086
  "${on_b[@]}" "${gated[@]}" $client_command > "$out/client.$name" 2>&1 &
  client[$name]=$!
done
status=0
for entry in "${cases[@]}"; do
  IFS='|' read -r name _ _ done_line <<< "$entry"
  judge_pair "$name" "$name" "$done_line" || status=1
done
exit $status
