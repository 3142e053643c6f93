#!/usr/bin/env bash
# Debian's verbs programs through an installed `softrdma` (issue 17): ibv_devinfo
# sees the device at the expected version, an rping pair (rdma_cm through
# softrdma's librdmacm) exchanges 3 pings, an ib_write_bw pair moves 64 KiB x 200.
# Shared by install_prefix.sh (a cmake --install prefix) and debian_root.sh (the
# package installed with apt in a clean Debian root, where this script runs
# inside the chroot), so both check the same things.
#   run_clients.sh SOFTRDMA VERSION PORT WORKDIR    (PORT and PORT+1 are used)
set -euo pipefail
sr=$1 version=$2 port=$3 work=$4
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done' EXIT
fail() { echo "run_clients: $*" >&2; exit 1; }

# Waits (at most 30 s) until `pattern` is in what `command` prints.
wait_until() {
  for _ in $(seq 300); do grep -q "$2" <<<"$(eval "$1")" && return 0; sleep 0.1; done
  return 1
}

# Whole outputs first: `cmd | grep -q` under pipefail fails when grep stops early.
devinfo=$("$sr" run -- ibv_devinfo)
grep -q "fw_ver:.*softrdma $version" <<<"$devinfo" || fail "ibv_devinfo: $devinfo"

"$sr" run -- rping -s -a 127.0.0.1 -p "$port" -C 3 -v > "$work/rping.server" 2>&1 &
pids+=($!)
wait_until "ss -lxH" "softrdma-rdmacm/[^ ]*/$port/" || fail "rping server not listening"
timeout 60 "$sr" run -- rping -c -a 127.0.0.1 -p "$port" -C 3 -v > "$work/rping.client" 2>&1 ||
  { cat "$work/rping.client"; fail "rping client"; }
[[ $(grep -c "ping data: rdma-ping-" "$work/rping.client") -eq 3 ]] ||
  { cat "$work/rping.client"; fail "rping: not 3 pings"; }

bw_port=$((port + 1))
"$sr" run -- ib_write_bw -p "$bw_port" -s 65536 -n 200 > "$work/bw.server" 2>&1 &
pids+=($!)
wait_until "ss -ltnH 'sport = :$bw_port'" "." || fail "ib_write_bw server not listening"
timeout 60 "$sr" run -- ib_write_bw -p "$bw_port" -s 65536 -n 200 127.0.0.1 > "$work/bw.client" 2>&1 ||
  { cat "$work/bw.client"; fail "ib_write_bw client"; }
grep -Eq '^\s*65536\s+200\s+' "$work/bw.client" || { cat "$work/bw.client"; fail "ib_write_bw: no result row"; }
echo "run_clients: softrdma $version: ibv_devinfo, rping x3 and ib_write_bw 64 KiB x200 pass"
