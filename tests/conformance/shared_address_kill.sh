#!/usr/bin/env bash
# Issue 27 (docs/decisions/host-rnic.md): four ibv_rc_pingpong servers share one
# host's address (SOFTRDMA_SHARE_ADDRESS=1), each with a client on another host.
# Once every pair is connected, one server is killed with SIGKILL. Its socket
# leaves the address's group, which reorders the others' (the kernel moves the
# last member into the hole), so until the survivors have probed again their
# packets land at the wrong process and are handed over. The three other pairs
# must finish with every buffer checked (-c); the victim's client must fail (its
# peer is gone: retries exhausted), not hang. Needs root (ip netns).
# The limits are the run's, not a measure: beside another test stage on a 2-core
# machine an iteration took 1.5 ms, spinning or not, so 50 000 took 75-87 s, and
# clients ran into the former 90 s limit (a fresh clone, 2026-11-30: one to three
# clients timed out, and their servers then exhausted their retries). ctest's
# own limit is 240 s. The programs wait on their completion channels (-e) rather
# than spin, which leaves the cores to the test stage beside them.
#   shared_address_kill.sh SOFTRDMA_TOOL TAG
set -euo pipefail
tool=$1
tag=$2
a=ska$tag b=skb$tag
source "$(dirname "${BASH_SOURCE[0]}")/host_pair.sh" 10.213.11
share=(SOFTRDMA_SHARE_ADDRESS=1)
ports=(7411 7412 7413 7414)
victim=7414
iters=50000
declare -A server client
for port in "${ports[@]}"; do
  # stdbuf -oL: each line is written as printed, so the client's "remote address"
  # says when the pair has connected.
  ip netns exec "$a" env SOFTRDMA_ADDR=10.213.11.1 "${share[@]}" timeout 200 \
    "$tool" run -- stdbuf -oL ibv_rc_pingpong -g 1 -c -e -p "$port" -n $iters > "$out/server.$port" 2>&1 &
  server[$port]=$!
done
for port in "${ports[@]}"; do  # until each server listens for its client
  for _ in $(seq 1500); do
    ip netns exec "$a" ss -ltnH "sport = :$port" | grep -q . && break
    sleep 0.02
  done
done
for port in "${ports[@]}"; do
  ip netns exec "$b" env SOFTRDMA_ADDR=10.213.11.2 "${share[@]}" timeout 180 "$tool" run -- \
    stdbuf -oL ibv_rc_pingpong -g 1 -c -e -p "$port" -n $iters 10.213.11.1 > "$out/client.$port" 2>&1 &
  client[$port]=$!
done
# Every pair has exchanged its QP numbers (the client printed the server's) and the
# victim's is moving data: then the kill.
for port in "${ports[@]}"; do
  for _ in $(seq 1500); do
    grep -q "remote address" "$out/client.$port" && break
    sleep 0.02
  done
done
# The program itself (not its `timeout` or `softrdma run`): its command line starts
# with its name and ends without an address.
victim_pid=$(pgrep -f "^ibv_rc_pingpong -g 1 -c -e -p $victim -n $iters\$" | head -1 || true)
[[ -n $victim_pid ]] || { echo "FAIL: the victim's server is not running"; exit 1; }
echo "killing the server of port $victim (pid $victim_pid)"
kill -KILL "$victim_pid"
status=0
for port in "${ports[@]}"; do
  rc=0
  wait "${client[$port]}" || rc=$?
  echo "== client $port (exit $rc)"; cat "$out/client.$port"
  if [[ $port == "$victim" ]]; then
    (( rc != 0 && rc != 124 )) || { echo "FAIL: the victim's client did not fail by itself"; status=1; }
  else
    (( rc == 0 )) && grep -q "$iters iters in" "$out/client.$port" ||
      { echo "FAIL: client $port did not finish"; status=1; }
  fi
done
for port in "${ports[@]}"; do
  [[ $port == "$victim" ]] && continue
  wait "${server[$port]}" || { echo "FAIL: server $port failed"; status=1; }
  grep -q "$iters iters in" "$out/server.$port" || { echo "FAIL: server $port did not finish"; cat "$out/server.$port"; status=1; }
done
wait "${server[$victim]}" 2>/dev/null || true
exit $status
