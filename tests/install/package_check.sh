#!/usr/bin/env bash
# The Debian package (issue 17): cpack makes softrdma_VERSION_amd64.deb whose
# control fields and files are what docs/decisions/installation.md says, and whose
# payload, unpacked into an empty directory, runs: the unpacked softrdma finds its
# libraries in usr/lib/softrdma and Debian's ibv_devinfo sees the device.
#   package_check.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2
work=$(mktemp -d /tmp/softrdma-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "package_check: $*" >&2; exit 1; }
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"  # Debian's ibv_devinfo, under an ASan build

(cd "$build" && cpack -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack failed"; }
arch=$(dpkg --print-architecture)
deb=$work/out/softrdma_${version}_${arch}.deb
[[ -f $deb ]] || fail "no $deb: $(ls "$work/out")"
[[ $(dpkg-deb -f "$deb" Package) == softrdma ]] || fail "Package"
[[ $(dpkg-deb -f "$deb" Version) == "$version" ]] || fail "Version"
depends=$(dpkg-deb -f "$deb" Depends)
for needed in libc6 libstdc++6 libisal2; do
  grep -q "\b$needed\b" <<<"$depends" || fail "Depends lacks $needed: $depends"
done
files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort)
expected=$(printf '%s\n' ./usr/bin/softrdma ./usr/lib/softrdma/libefa.so.1 \
  ./usr/lib/softrdma/libibverbs.so.1 ./usr/lib/softrdma/libmlx5.so.1 \
  ./usr/lib/softrdma/librdmacm.so.1)
[[ $files == "$expected" ]] || fail "files: $files"

dpkg-deb -x "$deb" "$work/root"
sr=$work/root/usr/bin/softrdma
[[ $("$sr" --version) == "softrdma $version" ]] || fail "--version"
devinfo=$("$sr" run -- ibv_devinfo)
grep -q "fw_ver:.*softrdma $version" <<<"$devinfo" || fail "ibv_devinfo: $devinfo"
status=$("$sr" status)
grep -q "^library .*$work/root/usr/lib/softrdma/libibverbs.so.1$" <<<"$status" ||
  fail "status: $(grep '^library' <<<"$status")"
echo "package_check: $(basename "$deb"), Depends: $depends; 5 files; unpacked, it runs ibv_devinfo"
