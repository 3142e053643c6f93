#!/usr/bin/env bash
# Where the time of one softrdma perftest case goes: both processes under
# `perf record -e cpu-clock -g` (no hardware counters on these machines), then for
# each the top of `perf report` by DSO and symbol, and the system calls of the data
# path counted by `perf stat` on the syscall tracepoints, per iteration.
#
#   bench/profile.sh ib_send_lat -s 8 -n 100000
#   bench/profile.sh ib_read_bw -s 1048576 -n 2000
#
# Needs the release build (bench/compare.sh makes it) and root for the tracepoints.
set -eu  # no pipefail: `perf report | head` ends perf with SIGPIPE
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 ]] || { sed -n 2,9p "$0"; exit 2; }
tool=$1
shift
softrdma=build/tools/softrdma
out=${SOFTRDMA_PROFILE_DIR:-/tmp/softrdma-profile}
mkdir -p "$out"
port=$((20000 + RANDOM % 10000))
iters=$(sed -n 's/.*-n \([0-9]*\).*/\1/p' <<<"$*")
events=syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sendmsg,syscalls:sys_enter_poll,syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex,syscalls:sys_enter_write,syscalls:sys_enter_epoll_pwait2,syscalls:sys_enter_process_vm_readv,syscalls:sys_enter_process_vm_writev

run_pair() {  # run_pair WRAPPER...: the server and the client, each under WRAPPER side
  "$@" server "$softrdma" run -- "$tool" -p "$port" "${args[@]}" > "$out/server.txt" 2>&1 &
  local server=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
  "$@" client "$softrdma" run -- "$tool" -p "$port" "${args[@]}" 127.0.0.1 > "$out/client.txt" 2>&1
  wait $server
  port=$((port + 1))
}
record() { local side=$1; shift; perf record -q -e cpu-clock -g -o "$out/$side.data" -- "$@"; }
count() { local side=$1; shift; perf stat -x, -e "$events" -o "$out/$side.stat" -- "$@"; }

args=("$@")
run_pair record
grep -E '^\s*[0-9]+\s+[0-9]+\s' "$out/client.txt" | tail -1 | sed 's/^/perftest row: /'
for side in server client; do
  echo "=== $side: cpu-clock samples by DSO"
  perf report -q -i "$out/$side.data" --no-children --sort dso --stdio -g none 2>/dev/null |
    grep -v '^$' | head -8
  echo "=== $side: top symbols"
  perf report -q -i "$out/$side.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
    grep -v '^$' | head -25
done
run_pair count
for side in server client; do
  echo "=== $side: system calls${iters:+ per iteration ($iters iterations)}"
  awk -F, -v n="${iters:-1}" '$3 ~ /syscalls/ {printf "  %-34s %12d  %8.2f\n", $3, $1, $1 / n}' \
    "$out/$side.stat"
done
