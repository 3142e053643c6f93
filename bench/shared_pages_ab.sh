#!/usr/bin/env bash
# Same-host perftest with shared pages (the default) against the same runs with
# SOFTRDMA_SHARED_PAGES_MB=0 (every copy by cross-memory attach), alternating, three
# pairs per row, medians printed (docs/performance.md, "Same-host shared pages").
#
#   bench/shared_pages_ab.sh            # the table's rows
#   bench/shared_pages_ab.sh ib_write_lat:8:20000 ib_read_bw:1048576:2000
#
# Needs the release build (bench/compare.sh makes it). Records the load average
# before and after: figures taken on a busy machine say little.
set -eu
cd "$(dirname "${BASH_SOURCE[0]}")/.."
softrdma=build/tools/softrdma
port=$((21000 + RANDOM % 5000))
rows=("$@")
[[ ${#rows[@]} -gt 0 ]] || rows=(ib_send_lat:8:20000 ib_write_lat:8:20000 ib_read_lat:8:20000
  ib_atomic_lat:8:20000 ib_write_bw:1048576:2000 ib_read_bw:1048576:2000
  ib_send_bw:1048576:2000 ib_write_bw:8:200000)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One pair of processes; prints the typical latency (µs), the average bandwidth
# (MB/s) or, for 8 B bandwidth runs, the message rate (Mpps).
run() {  # run TOOL SIZE ITERS [VAR=VALUE...]
  local tool=$1 size=$2 iters=$3
  shift 3
  port=$((port + 1))
  env "$@" "$softrdma" run -- "$tool" -p "$port" -s "$size" -n "$iters" > "$out/server" 2>&1 &
  local server=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.05; done
  env "$@" "$softrdma" run -- "$tool" -p "$port" -s "$size" -n "$iters" 127.0.0.1 > "$out/client" 2>&1
  wait "$server"
  local column=4
  [[ $tool == *_lat ]] && column=5
  [[ $tool == *_bw && $size == 8 ]] && column=5
  awk -v s="$size" -v c="$column" '$1 == s { print $c }' "$out/client"
}

median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for row in "${rows[@]}"; do
  IFS=: read -r tool size iters <<< "$row"
  shared=() calls=()
  for _ in 1 2 3; do
    shared+=("$(run "$tool" "$size" "$iters")")
    calls+=("$(run "$tool" "$size" "$iters" SOFTRDMA_SHARED_PAGES_MB=0)")
  done
  echo "$tool -s $size: shared pages ${shared[*]} (median $(median "${shared[@]}"))" \
       "| system calls ${calls[*]} (median $(median "${calls[@]}"))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
