#!/usr/bin/env bash
# One softrdma flow beside one TCP flow through the incast bed's bottleneck (issue
# 28; docs/decisions/fabric-switch.md): sender 1 runs `ib_write_bw` (64 KiB
# messages, RoCE MTU 1024, selective repeat), sender 2 a TCP bulk flow
# (bench/tcp_share.py; CUBIC, Linux's default, unless TCP_CC says otherwise: the
# host's own default may differ (this one's is bbr, which answers neither loss
# nor ECN marks); ECN on: net.ipv4.tcp_ecn=1 in its namespace, as a data-centre
# host configured for ECN), both into one receiver
# through a softrdma-fabric-switch port of RATE Mbit/s, BUFFER KiB, CE above MARK
# KiB, DURATION s; with DCQCN and without. Printed: each flow's MB/s, softrdma's
# share of the two, what the switch dropped and marked. Needs root.
#   bench/tcp_fairness.sh [BUILD] [DURATION] [RUNS]
#   env: RATE=400 BUFFER=128 MARK=32 MODES="dcqcn+delay dcqcn delay off" TCP_CC=cubic
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/fabric_bench.sh" 400 "$@"
tcp_cc=${TCP_CC:-cubic}
echo "# softrdma beside TCP ($tcp_cc): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "link $rate Mbit/s, buffer $buffer KiB, mark above $mark KiB, $duration s per run"
printf "%-6s %4s %12s %10s %8s %9s %9s\n" mode run "softrdma MB/s" "TCP MB/s" "share" "dropped%" "marked%"
for mode in "${modes[@]}"; do
  for ((run = 1; run <= runs; ++run)); do
    (
      fabric_prefix=tf fabric_switch=$fabric_switch
      source "$here/../tests/conformance/fabric_router.sh" 10.213.52 2
      start_switch --rate-mbit "$rate" --buffer-kb "$buffer" --mark-kb "$mark"
      ip netns exec "${senders[1]}" sysctl -qw net.ipv4.tcp_ecn=1
      args=(-D "$duration" -s 65536 -m 1024 -F -p 18700)
      on "$receiver" ib_write_bw "${args[@]}" > "$out/server" 2>&1 &
      server=$!
      ip netns exec "$receiver" python3 "$here/tcp_share.py" serve 18701 "$duration" > "$out/tcp" 2>&1 &
      tcp_server=$!
      for port in 18700 18701; do
        for _ in $(seq 500); do
          ip netns exec "$receiver" ss -ltnH "sport = :$port" | grep -q . && break
          sleep 0.02
        done
      done
      on "${senders[0]}" ib_write_bw "${args[@]}" "${addr[$receiver]}" > "$out/client" 2>&1 &
      client=$!
      ip netns exec "${senders[1]}" python3 "$here/tcp_share.py" send "${addr[$receiver]}" 18701 \
        $((duration + 2)) "$tcp_cc" > "$out/tcp_sender" 2>&1 &
      tcp_client=$!
      for pid in "$client" "$server" "$tcp_server" "$tcp_client"; do wait "$pid" || true; done
      grep -q "^tcp-congestion-control $tcp_cc\$" "$out/tcp_sender" ||
        { echo "the TCP flow did not run $tcp_cc:" >&2; cat "$out/tcp_sender" >&2; }
      stats=$(switch_stats)
      rdma=$(awk '$1 == 65536 { print $4; found = 1 } END { if (!found) print 0 }' "$out/client")
      tcp=$(awk '/^tcp/ { print $2 }' "$out/tcp")
      python3 - "$mode" "$run" "$rdma" "${tcp:-0}" "$stats" <<'PY'
import sys
mode, run, rdma, tcp, stats = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split()
s = dict(zip(stats[1::2], stats[2::2]))
arrived = int(s.get("arrived", 0)) or 1
share = rdma / (rdma + tcp) if rdma + tcp else 0
print("%-6s %4s %12.1f %10.1f %8.2f %9.2f %9.2f" % (mode, run, rdma, tcp, share,
      100.0 * int(s.get("dropped", 0)) / arrived, 100.0 * int(s.get("marked", 0)) / arrived))
PY
    )
  done
done
