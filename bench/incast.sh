#!/usr/bin/env bash
# Incast through a shallow-buffered bottleneck (issue 28; docs/decisions/
# congestion-control.md, fabric-switch.md): SENDERS hosts each run one
# `ib_write_bw` flow (64 KiB messages, RoCE MTU 1024, DURATION s) into one
# receiver host whose port on the router is a softrdma-fabric-switch of RATE
# Mbit/s, BUFFER KiB, marking ECN-capable packets CE above MARK KiB. Each case
# runs with each SOFTRDMA_CONGESTION of MODES side by side (the default: DCQCN
# and the delay control together, each alone, and none; "delay" sends Not-ECT,
# so the switch marks nothing: the delay control alone); printed per run: total
# goodput and its share of the link, Jain's fairness index over the flows, what
# the switch dropped and marked, and the latency a small message meets
# meanwhile: one more sender host runs `ib_send_lat` (8 B, 2000 iterations) to
# the receiver while the flows run (typical and 99th percentile, µs; SENDERS 0
# gives the idle row). Needs root.
#   bench/incast.sh [BUILD] [DURATION] [RUNS] [SENDERS...]
#   env: RATE=1000 BUFFER=128 MARK=32 MODES="dcqcn+delay dcqcn delay off"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/fabric_bench.sh" 1000 "$@"
counts=("${rest[@]}")
((${#counts[@]})) || counts=(3 6)
echo "# incast: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), link $rate Mbit/s," \
  "buffer $buffer KiB, mark above $mark KiB, $duration s per run"
printf "%-8s %-11s %4s %10s %7s %7s %9s %9s %9s %9s  %s\n" senders mode run "MB/s" "link" "jain" \
  "dropped%" "marked%" "lat_us" "lat99_us" "flows"
for n in "${counts[@]}"; do
  for mode in "${modes[@]}"; do
    for ((run = 1; run <= runs; ++run)); do
      (
        fabric_prefix=ic fabric_switch=$fabric_switch
        # One host more than the flows: the latency probe's.
        source "$here/../tests/conformance/fabric_router.sh" 10.213.50 $((n + 1))
        start_switch --rate-mbit "$rate" --buffer-kb "$buffer" --mark-kb "$mark"
        args=(-D "$duration" -s 65536 -m 1024 -F)
        pids=()
        declare -A flow_pid=()  # server$i / client$i: its pid, for its exit status
        for ((i = 1; i <= n; ++i)); do
          on "$receiver" ib_write_bw "${args[@]}" -p $((18500 + i)) > "$out/server$i" 2>&1 &
          flow_pid[server$i]=$!
        done
        for ((i = 1; i <= n; ++i)); do  # until each server listens
          for _ in $(seq 500); do
            ip netns exec "$receiver" ss -ltnH "sport = :$((18500 + i))" | grep -q . && break
            sleep 0.02
          done
        done
        on "$receiver" ib_send_lat -s 8 -n 2000 -F -p 18599 > "$out/lat_server" 2>&1 &
        pids+=($!)
        for ((i = 1; i <= n; ++i)); do
          on "${senders[$((i - 1))]}" ib_write_bw "${args[@]}" -p $((18500 + i)) "${addr[$receiver]}" \
            > "$out/client$i" 2>&1 &
          flow_pid[client$i]=$!
        done
        # The probe starts once the flows have had a second to fill the queue.
        sleep 1
        for _ in $(seq 500); do
          ip netns exec "$receiver" ss -ltnH "sport = :18599" | grep -q . && break
          sleep 0.02
        done
        on "${senders[$n]}" ib_send_lat -s 8 -n 2000 -F -p 18599 "${addr[$receiver]}" \
          > "$out/lat_client" 2>&1 || true
        for pid in "${pids[@]}"; do wait "$pid" || true; done
        declare -A flow_status=()  # 124: `timeout` ended it; 128+N: signal N
        for name in "${!flow_pid[@]}"; do
          flow_status[$name]=0
          wait "${flow_pid[$name]}" || flow_status[$name]=$?
        done
        stats=$(switch_stats)
        flows=()
        for ((i = 1; i <= n; ++i)); do
          flows+=("$(awk '$1 == 65536 { print $4; found = 1 } END { if (!found) print 0 }' "$out/client$i")")
          grep -q '^ 65536 ' "$out/client$i" ||
            { echo "== flow $i ($mode, run $run): no result; client exit ${flow_status[client$i]}," \
                "server exit ${flow_status[server$i]}; they said:"
              tail -n 30 "$out/client$i" "$out/server$i"; } >&2
        done
        # ib_send_lat's row: bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
        latency=$(awk '$1 == 8 { print $5, $8; found = 1 } END { if (!found) print "- -" }' "$out/lat_client")
        python3 - "$rate" "$n" "$mode" "$run" "$stats" "$latency" "${flows[@]}" <<'PY'
import sys
rate, n, mode, run, stats = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split()
latency = sys.argv[6].split()
flows = [float(x) for x in sys.argv[7:]]
s = dict(zip(stats[1::2], stats[2::2]))
total = sum(flows)
jain = total * total / (len(flows) * sum(x * x for x in flows)) if total else 0
arrived = int(s.get("arrived", 0)) or 1
print("%-8s %-11s %4s %10.1f %6.2fx %7.3f %9.2f %9.2f %9s %9s  %s" % (
    n, mode, run, total, total * 8 / rate, jain, 100.0 * int(s.get("dropped", 0)) / arrived,
    100.0 * int(s.get("marked", 0)) / arrived, latency[0], latency[1],
    " ".join("%.0f" % f for f in flows)))
PY
      )
    done
  done
done
