#!/usr/bin/env bash
# cmake --install into a temporary prefix (issue 17): the installed `softrdma`
# finds its libraries in PREFIX/lib*/softrdma (nothing lands beside the system's),
# says the project's version, and runs unmodified Debian programs — ibv_devinfo,
# an rping pair (rdma_cm, softrdma's librdmacm) and an ib_write_bw pair — on them.
#   install_prefix.sh BUILD_DIR VERSION PORT
set -euo pipefail
build=$1 version=$2 port=$3
# In a sanitizer build the programs run with ASan preloaded; Debian's perftest
# and rping leak at exit by design (as in tests/conformance/run_client.py).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
prefix=$(mktemp -d /tmp/softrdma-install.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$prefix"
}
trap cleanup EXIT
fail() { echo "install_prefix: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$prefix.log" 2>&1 || { cat "$prefix.log"; fail "cmake --install failed"; }
rm -f "$prefix.log"
sr=$prefix/bin/softrdma
[[ -x $sr ]] || fail "no $sr"
mapfile -t libs < <(cd "$prefix" && find . -type f -name '*.so*' | sort)
for lib in "${libs[@]}"; do
  [[ $lib == ./lib*/softrdma/lib*.so.1 ]] || fail "a library outside lib/softrdma: $lib"
done
[[ ${#libs[@]} -eq 4 ]] || fail "expected 4 libraries, found: ${libs[*]}"
[[ "$("$sr" --version)" == "softrdma $version" ]] || fail "--version: $("$sr" --version)"
# Whole outputs first: `cmd | grep -q` under pipefail fails when grep stops early.
status=$("$sr" status)
grep -q "^library .*$prefix/lib.*/softrdma/libibverbs.so.1$" <<<"$status" ||
  fail "status does not name the installed library: $(grep '^library' <<<"$status")"
devinfo=$("$sr" run -- ibv_devinfo)
grep -q "fw_ver:.*softrdma $version" <<<"$devinfo" || fail "ibv_devinfo: $devinfo"

# Waits (at most 30 s) until `pattern` is in what `command` prints.
wait_until() {
  for _ in $(seq 300); do grep -q "$2" <<<"$(eval "$1")" && return 0; sleep 0.1; done
  return 1
}

"$sr" run -- rping -s -a 127.0.0.1 -p "$port" -C 3 -v > "$prefix/rping.server" 2>&1 &
pids+=($!)
wait_until "ss -lxH" "softrdma-rdmacm/[^ ]*/$port/" || fail "rping server not listening"
timeout 60 "$sr" run -- rping -c -a 127.0.0.1 -p "$port" -C 3 -v > "$prefix/rping.client" 2>&1 ||
  { cat "$prefix/rping.client"; fail "rping client"; }
[[ $(grep -c "ping data: rdma-ping-" "$prefix/rping.client") -eq 3 ]] ||
  { cat "$prefix/rping.client"; fail "rping: not 3 pings"; }

bw_port=$((port + 1))
"$sr" run -- ib_write_bw -p "$bw_port" -s 65536 -n 200 > "$prefix/bw.server" 2>&1 &
pids+=($!)
wait_until "ss -ltnH 'sport = :$bw_port'" "." || fail "ib_write_bw server not listening"
timeout 60 "$sr" run -- ib_write_bw -p "$bw_port" -s 65536 -n 200 127.0.0.1 > "$prefix/bw.client" 2>&1 ||
  { cat "$prefix/bw.client"; fail "ib_write_bw client"; }
grep -Eq '^\s*65536\s+200\s+' "$prefix/bw.client" || { cat "$prefix/bw.client"; fail "ib_write_bw: no result row"; }
echo "install_prefix: ${#libs[@]} libraries in $(dirname "${libs[0]}"), softrdma $version, ibv_devinfo, rping x3 and ib_write_bw 64 KiB x200 pass"
