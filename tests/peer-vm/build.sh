#!/usr/bin/env bash
# Makes (once) what tests/peer-vm/run-guest.sh boots: Debian's own kernel with the
# rdma_rxe and siw modules, and a busybox initramfs holding rdma-core 44's tools.
# docs/decisions/peer-vm.md says why it is built this way.
#
# Everything goes to the cache, never into the repository:
#   ${SOFTRDMA_PEER_VM_CACHE:-~/.cache/softrdma-peer-vm}/
#     kernel-release   e.g. 6.1.0-56-amd64: the guest's kernel (scripts/interop.py
#                      builds its CRC-requiring siw.ko for it, from siw-src/)
#     vmlinuz  initramfs.gz   what QEMU boots
#     siw-src/         the siw sources of that kernel, and siw.ko built from them
#     debs/ image/ stage/ rootfs/   downloads and intermediate trees
# Run as root (after scripts/install-deps.sh). Nothing is redone that is already
# there; the initramfs is made again when this script, initramfs.sh or
# guest-init.sh changed.
# A lock makes concurrent callers wait for the first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${SOFTRDMA_PEER_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softrdma-peer-vm}
mkdir -p "$cache/debs"
exec 8>"$cache/lock"
flock 8

say() { echo "peer-vm build: $*" >&2; }
fail() { say "$*"; exit 1; }

for tool in qemu-system-x86_64 cpio depmod modprobe xz; do
  command -v "$tool" >/dev/null || fail "no $tool: run scripts/install-deps.sh"
done
# The whole list first: busybox writes it one applet per write(), so under
# pipefail `busybox --list | grep -q` fails whenever grep stops before the last
# write (SIGPIPE); under load it did, in CI.
applets=$([[ -x /bin/busybox ]] && /bin/busybox --list || true)
grep -qx sh <<<"$applets" || fail "no static busybox: run scripts/install-deps.sh"

# The guest's kernel is the one whose headers are installed (linux-headers-amd64,
# from install-deps.sh): siw.ko must be built against exactly that release.
headers_dep=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 2>/dev/null || true)
[[ $headers_dep =~ linux-headers-([0-9][^ ,]*-amd64) ]] ||
  fail "linux-headers-amd64 is not installed: run scripts/install-deps.sh"
release=${BASH_REMATCH[1]}
kbuild=/usr/src/linux-headers-$release
[[ -f $kbuild/Makefile ]] || fail "$kbuild missing"
version=$(dpkg-query -W -f='${Version}' "linux-headers-$release")
source_pkg=linux-source-$(cut -d. -f1,2 <<<"$release")

# rdma-core 44 and perftest as Debian ships them, with the libraries they load.
user_pkgs=(libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils rdmacm-utils perftest
           libnl-3-200 libnl-route-3-200 libpci3)

deb_of() { compgen -G "$cache/debs/${1}_*.deb" | head -n 1; }

fetch_debs() {  # name[=version]...: apt-get download what the cache lacks
  local want=() spec
  for spec in "$@"; do
    [[ -n $(deb_of "${spec%%=*}") ]] || want+=("$spec")
  done
  ((${#want[@]})) || return 0
  say "downloading ${want[*]}"
  # apt warns that root downloads unsandboxed (its _apt user cannot write here): harmless.
  (cd "$cache/debs" && apt-get download -q "${want[@]}" 2>&1 | grep -v unsandboxed >&2) || true
  for spec in "${want[@]}"; do
    [[ -n $(deb_of "${spec%%=*}") ]] || fail "apt-get download $spec failed"
  done
}

unpack_kernel() {
  [[ -f $cache/vmlinuz && -f $cache/image/lib/modules/$release/modules.dep &&
     $(cat "$cache/kernel-release" 2>/dev/null) == "$release" ]] && return 0
  say "unpacking linux-image-$release"
  rm -rf "$cache/image" "$cache/siw-src" "$cache/initramfs.gz"
  dpkg-deb -x "$(deb_of "linux-image-$release")" "$cache/image"
  cp "$cache/image/boot/vmlinuz-$release" "$cache/vmlinuz"
  echo "$release" >"$cache/kernel-release"
}

# CONFIG_RDMA_SIW is off in Debian's kernel: build siw.ko from the same version's
# sources, against the installed headers, and put it among the image's modules.
build_siw() {
  local dest=$cache/image/lib/modules/$release/extra/siw.ko
  [[ -f $dest ]] && return 0
  say "building siw.ko for $release"
  rm -rf "$cache/siw-src"
  mkdir -p "$cache/siw-src"
  dpkg-deb --fsys-tarfile "$(deb_of "$source_pkg")" |
    tar -xO --wildcards './usr/src/linux-source-*.tar.xz' |
    tar -xJ -C "$cache/siw-src" --wildcards --strip-components=5 '*/drivers/infiniband/sw/siw/*'
  [[ -f $cache/siw-src/siw_main.c ]] || fail "no siw sources in $source_pkg"
  make -s -C "$kbuild" M="$cache/siw-src" CONFIG_RDMA_SIW=m modules >&2
  mkdir -p "$(dirname "$dest")"
  cp "$cache/siw-src/siw.ko" "$dest"
  depmod -b "$cache/image" "$release"
}

fetch_debs "linux-image-$release=$version" "$source_pkg=$version" "${user_pkgs[@]}"
unpack_kernel
build_siw

# The initramfs is made again when what makes it changed: keyed by content, not
# by time, so that a fresh clone (new files, old cache) reuses it.
initrd=$cache/initramfs.gz
key=$(cat "$here/build.sh" "$here/initramfs.sh" "$here/guest-init.sh" | sha256sum | cut -c1-16)-$release
if [[ -f $initrd && $(cat "$cache/initramfs.key" 2>/dev/null) == "$key" ]]; then
  exit 0
fi
say "building the initramfs"
# shellcheck source=initramfs.sh
source "$here/initramfs.sh"
make_initramfs "$cache" "$release" "$here/guest-init.sh" "${user_pkgs[@]}"
echo "$key" >"$cache/initramfs.key"
say "ready: kernel $release, $(du -h "$initrd" | cut -f1) initramfs, in $cache"
