#!/usr/bin/env bash
# Issue 28: two softrdma hosts (network namespaces on a veth pair, offloads off:
# every packet its own frame) whose data packets are dropped at random, 5 % of
# those of 1000 bytes and more each host receives (iptables in each host's INPUT:
# the sender's own OUTPUT would fail its sendto). The traffic node
# (tests/support/traffic) runs every RC operation across it, checks every byte
# and completion, and prints the engine counters that moved.
#   sr:  selective repeat, agreed through ECE as an application without the
#        rdma_cm agrees on it (the node exchanges ibv_query_ece offers and takes
#        the peer's with ibv_set_ece; docs/decisions/selective-repeat.md): both
#        sides must have sent and received SACKs, and resent about what was lost;
#   gbn: SOFTRDMA_SELECTIVE_REPEAT=off, IBA's go-back-N: no SACK anywhere.
#   ecn: nothing dropped; instead 5 % of those packets arrive marked ECN CE (the
#        iptables ECN target in each host's PREROUTING, as a congested switch
#        marks an ECN-capable packet): each host must have received marked
#        packets (so softrdma sends ECT(0)), answered them with CNPs, and
#        received the other's CNPs (docs/decisions/congestion-control.md); the
#        client's capture (SOFTRDMA_PCAP) must decode in tshark, every ICRC good
#        (scripts/check_capture.sh), with CNPs (BTH opcode 129) both ways, its
#        packets ECT(0) and marked ones CE.
# Needs root (ip netns, iptables).
#   lossy_fabric.sh SOFTRDMA_TOOL TRAFFIC_NODE PORT_BASE sr|gbn|ecn
set -euo pipefail
tool=$1
node=$2
port=$(($3 + 28))
mode=$4
a="lf${mode}${3}a"
b="lf${mode}${3}b"
subnet=10.213.30
source "$(dirname "${BASH_SOURCE[0]}")/host_pair.sh" "$subnet"
for ns in "$a" "$b"; do
  ip netns exec "$ns" ethtool -K "v$ns" tso off gso off gro off tx-udp-segmentation off > /dev/null 2>&1 || true
  if [[ $mode == ecn ]]; then
    # --ecn-ip-ect 3 writes CE into the ECN field of what is ECN-capable or not:
    # the test checks the sender's ECT(0) through the receiver's count instead.
    ip netns exec "$ns" iptables -t mangle -A PREROUTING -p udp --dport 4791 \
      -m length --length 1000:65535 -m tos --tos 0x02/0x03 \
      -m statistic --mode random --probability 0.05 -j ECN --ecn-ip-ect 3
  else
    ip netns exec "$ns" iptables -A INPUT -p udp --dport 4791 -m length --length 1000:65535 \
      -m statistic --mode random --probability 0.05 -j DROP
  fi
done
mode_env=()
[[ $mode == gbn ]] && mode_env=(SOFTRDMA_SELECTIVE_REPEAT=off)
scale=0.2
[[ $mode == gbn ]] && scale=0.05  # go-back-N at 5 % loss is slow: fewer bytes
run_node() {  # run_node HOST ROLE ARGS...: the node under `softrdma run`, nothing else set
  local host=$1
  shift
  local capture=()
  [[ $mode == ecn && $1 == --role=client ]] && capture=(SOFTRDMA_PCAP="$out/client.pcap")
  ip netns exec "$host" env -u SOFTRDMA_ADDR -u SOFTRDMA_SHARE_ADDRESS "${mode_env[@]}" "${capture[@]}" \
    timeout 150 "$tool" run -- "$node" --mode=test --mtu=1024 --scale="$scale" \
    --softrdma="$tool" "$@"
}
run_node "$a" --role=server --listen="$port" > "$out/server" 2>&1 &
server=$!
# The client connects once the server listens (its out-of-band TCP channel).
for ((i = 0; i < 600; ++i)); do
  ip netns exec "$a" ss -ltn "sport = :$port" | grep -q LISTEN && break
  kill -0 "$server" 2> /dev/null || break
  sleep 0.05
done
client_status=0
run_node "$b" --role=client --connect="$subnet.1:$port" > "$out/client" 2>&1 || client_status=$?
server_status=0
wait "$server" || server_status=$?
cat "$out/server" "$out/client"
fail() {
  echo "FAIL: $*"
  exit 1
}
[[ $server_status == 0 && $client_status == 0 ]] || fail "server exited $server_status, client $client_status"
for role in server client; do
  grep -q "^\[$role\] errors 0; verified [1-9]" "$out/$role" || fail "$role: errors, or nothing verified"
done
# counter ROLE NAME: its value in the node's "engine counters" line (0 if absent).
counter() {
  sed -n "s/^\[$1\] engine counters:.* $2=\([0-9]*\).*/\1/p" "$out/$1" | head -1 | grep . || echo 0
}
for role in server client; do
  sent=$(counter "$role" sacks_sent)
  received=$(counter "$role" sacks_received)
  resent=$(counter "$role" retransmitted_packets)
  tx=$(counter "$role" tx_packets)
  echo "$role: tx_packets $tx, retransmitted_packets $resent, sacks_sent $sent, sacks_received $received"
  if [[ $mode == ecn ]]; then
    marked=$(counter "$role" ce_marked_received)
    cnps_sent=$(counter "$role" cnps_sent)
    cnps_received=$(counter "$role" cnps_received)
    echo "$role: ce_marked_received $marked, cnps_sent $cnps_sent, cnps_received $cnps_received"
    ((marked > 0)) || fail "$role: no packet arrived marked CE (were they sent ECT(0)?)"
    ((cnps_sent > 0 && cnps_sent <= marked)) || fail "$role: $cnps_sent CNPs for $marked marks"
    ((cnps_received > 0)) || fail "$role: no CNP received"
  elif [[ $mode == sr ]]; then
    ((sent > 0 && received > 0)) || fail "$role: no SACK sent or received"
    # 5 % of the data packets are lost: what is resent stays near that, where
    # go-back-N resends whole windows.
    ((resent * 100 < tx * 15)) || fail "$role: resent $resent of $tx packets"
  else
    ((sent == 0 && received == 0)) || fail "$role: a SACK under go-back-N"
  fi
done
if [[ $mode == ecn ]]; then
  sh "$(dirname "${BASH_SOURCE[0]}")/../../scripts/check_capture.sh" "$out/client.pcap" 1000 ||
    fail "the client's capture does not decode, or an ICRC is bad"
  # count FILTER: the capture's packets tshark matches.
  count() { tshark -r "$out/client.pcap" -Y "$1" -T fields -e frame.number 2> /dev/null | wc -l; }
  client_addr=$subnet.2
  cnps_out=$(count "infiniband.bth.opcode == 129 && ip.src == $client_addr")
  cnps_in=$(count "infiniband.bth.opcode == 129 && ip.dst == $client_addr")
  ect_out=$(count "udp.dstport == 4791 && ip.src == $client_addr && ip.dsfield.ecn == 2")
  not_ect_out=$(count "udp.dstport == 4791 && ip.src == $client_addr && ip.dsfield.ecn != 2")
  ce_in=$(count "udp.dstport == 4791 && ip.dst == $client_addr && ip.dsfield.ecn == 3")
  echo "capture: CNPs sent $cnps_out, received $cnps_in; ECT(0) sent $ect_out, other $not_ect_out; CE received $ce_in"
  ((cnps_out > 0 && cnps_in > 0)) || fail "tshark found no CNP in one direction"
  # The wire shows at least what the client's engine counted (its counters are
  # read before the node's last exchanges, which the capture holds too).
  ((cnps_out >= $(counter client cnps_sent) && cnps_in >= $(counter client cnps_received))) ||
    fail "the capture holds fewer CNPs than the client counted"
  ((ce_in >= $(counter client ce_marked_received))) ||
    fail "the capture holds fewer CE marks than the client counted"
  ((ect_out > 0 && not_ect_out == 0)) || fail "not every packet left ECT(0)"
  ((ce_in > 0)) || fail "no received packet shows CE"
fi
echo PASS
