#!/usr/bin/env bash
# cmake --install into a temporary prefix (issue 17): the installed `softrdma`
# finds its libraries in PREFIX/lib*/softrdma (nothing lands beside the system's),
# says the project's version, and runs unmodified Debian programs — ibv_devinfo,
# an rping pair (rdma_cm, softrdma's librdmacm) and an ib_write_bw pair — on them
# (run_clients.sh, which debian_root.sh runs too).
#   install_prefix.sh BUILD_DIR VERSION PORT
set -euo pipefail
build=$1 version=$2 port=$3
# In a sanitizer build the programs run with ASan preloaded; Debian's perftest
# and rping leak at exit by design (as in tests/conformance/run_client.py).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
prefix=$(mktemp -d /tmp/softrdma-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
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
"$(dirname "$0")/run_clients.sh" "$sr" "$version" "$port" "$prefix"
echo "install_prefix: ${#libs[@]} libraries in $(dirname "${libs[0]}"), softrdma $version"
