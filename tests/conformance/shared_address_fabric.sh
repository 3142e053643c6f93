#!/usr/bin/env bash
# Issue 27's test bed (docs/decisions/host-rnic.md): four hosts (network
# namespaces) on a bridge, each with one address. On the first host, at once,
# three ib_write_bw servers, an rping server and a ucmatose server, each reached by
# a client on another host; every process of a host on its host's one address, with
# nothing set (SOFTRDMA_ADDR and SOFTRDMA_SHARE_ADDRESS unset: the defaults serve
# the host's address, shared; DESIGN.md §6), and `ibv_devinfo` on the first host
# while its servers run must list that address.
#   roce:  RoCEv2; two ib_write_bw by GID (perftest's
#          own TCP exchange; one with -x 1), one with -R (rdma_cm)
#   iwarp: SOFTRDMA_WIRE=iwarp; the three with -R (iWARP connects by rdma_cm)
# Each client must print its result (perftest's row, rping's last ping, ucmatose's
# "data transfers complete") and every process must exit 0. Needs root.
#   shared_address_fabric.sh SOFTRDMA_TOOL TAG CONNECT_GATE_SO roce|iwarp
# perftest -R connects twice, the second time at once while its server is still
# between its two listens: the gate (tests/peer-vm/connect_gate.c), preloaded in
# every server, marks each rdma_listen that returned, and holds a -R client's
# N-th connect until its server's N-th mark.
set -euo pipefail
tool=$1
tag=$2
gate=$3
wire=$4
subnet=10.213.15
[[ $wire == iwarp ]] && subnet=10.213.16
fabric_prefix="fb${wire:0:1}$tag"
source "$(dirname "${BASH_SOURCE[0]}")/fabric_hosts.sh" "$subnet" 4
source "$(dirname "${BASH_SOURCE[0]}")/judge_pair.sh"
server_host=${hosts[0]}
server_addr=${addr[$server_host]}
on() {  # on HOST COMMAND...: a process of HOST, with nothing set but the wire
  local host=$1
  shift
  local wire_env=(SOFTRDMA_WIRE=roce)
  [[ $wire == iwarp ]] && wire_env=(SOFTRDMA_WIRE=iwarp)
  ip netns exec "$host" env -u SOFTRDMA_ADDR -u SOFTRDMA_SHARE_ADDRESS "${wire_env[@]}" \
    timeout 120 "$tool" run -- "$@"
}
by_gid=(-F -s 65536 -n 2000 --report_gbits)
if [[ $wire == iwarp ]]; then
  bw1=(ib_write_bw -R -p 7431 "${by_gid[@]}")
  bw2=(ib_write_bw -R -p 7432 "${by_gid[@]}")
else
  bw1=(ib_write_bw -p 7431 "${by_gid[@]}")
  bw2=(ib_write_bw -p 7432 -x 1 "${by_gid[@]}")
fi
bw3=(ib_write_bw -R -p 7433 "${by_gid[@]}")
# name | client host | port | server command | client's last line
cases=(
  "bw1|${hosts[1]}|7431|${bw1[*]}|^ *65536 +2000 "
  "bw2|${hosts[2]}|7432|${bw2[*]}|^ *65536 +2000 "
  "bw3|${hosts[3]}|7433|${bw3[*]}|^ *65536 +2000 "
  "rping|${hosts[1]}|7434|rping -s -a $server_addr -p 7434 -C 10 -v|ping data: rdma-ping-9: "
  "ucmatose|${hosts[2]}|7435|ucmatose -b $server_addr -p 7435 -c 3 -C 10|data transfers complete"
)
client_command() {  # the client of case NAME whose server runs SERVER_COMMAND
  case $1 in
    rping) echo "rping -c -a $server_addr -p 7434 -C 10 -v" ;;
    ucmatose) echo "ucmatose -s $server_addr -p 7435 -c 3 -C 10" ;;
    *) echo "$2 $server_addr" ;;
  esac
}
# preload VARIABLE=VALUE: `gated`, the words that preload the gate with that
# setting, after whatever `softrdma run` preloads (the ASan runtime in a sanitizer
# build).
preload() {
  gated=(env "$1" sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$gate")
}
declare -A server client
for entry in "${cases[@]}"; do
  IFS='|' read -r name _ _ server_command _ <<< "$entry"
  preload CONNECT_GATE_MARK="$out/listen.$name"
  # shellcheck disable=SC2086  # the commands are words
  on "$server_host" "${gated[@]}" $server_command > "$out/server.$name" 2>&1 &
  server[$name]=$!
done
listening() {  # NAME PORT: whether that server listens (perftest's TCP, or rdma_listen)
  [[ -e $out/listen.$1.1 ]] || grep -q . <<<"$(ip netns exec "$server_host" ss -ltnH "sport = :$2")"
}
for entry in "${cases[@]}"; do  # until each server listens for its client
  IFS='|' read -r name _ port _ _ <<< "$entry"
  for _ in $(seq 1500); do
    listening "$name" "$port" && break
    kill -0 "${server[$name]}" 2>/dev/null || break
    sleep 0.02
  done
done
# One more process on the host while its five servers hold the address (before
# issue 27's defaults it failed: "UDP port 4791 ... already held").
devinfo_status=0
on "$server_host" ibv_devinfo -v > "$out/devinfo" 2>&1 || devinfo_status=$?
for entry in "${cases[@]}"; do
  IFS='|' read -r name host _ server_command _ <<< "$entry"
  gated=()
  [[ $server_command == *" -R "* ]] && preload PEERVM_CONNECT_GATE="$out/listen.$name"
  # shellcheck disable=SC2046  # the command is words
  on "$host" "${gated[@]}" $(client_command "$name" "$server_command") > "$out/client.$name" 2>&1 &
  client[$name]=$!
done
status=0
if (( devinfo_status != 0 )) || ! grep -Eq "GID\[ *1\]:[[:space:]]*::ffff:$server_addr\b" "$out/devinfo"; then
  echo "FAIL: ibv_devinfo on $server_host (exit $devinfo_status) does not list ::ffff:$server_addr:"
  cat "$out/devinfo"
  status=1
else
  grep -E "GID\[" "$out/devinfo"
fi
for entry in "${cases[@]}"; do
  IFS='|' read -r name host _ _ done_line <<< "$entry"
  judge_pair "$name" "$name ($wire), client on $host" "$done_line" || status=1
done
exit $status
