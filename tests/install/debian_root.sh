#!/usr/bin/env bash
# The package in a clean Debian 12 root (issue 17): `apt-get install
# ./softrdma_*.deb` resolves its Depends from Debian's mirror, the installed
# /usr/bin/softrdma runs ibv_devinfo, an rping pair and an ib_write_bw pair
# (run_clients.sh), and `apt-get remove` then `purge` leave nothing of it.
#   debian_root.sh BUILD_DIR VERSION PORT     (PORT and PORT+1 are used)
#
# The root comes from packaging/debian-root.sh (mmdebstrap, cached under
# ~/.cache/softrdma); the test writes to an overlay over it, so the cache stays
# clean and the overlay's upper directory is exactly what the test changed.
# Needs root, mmdebstrap and the mirror; without them it fails, saying which.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 version=$2 port=$3
fail() { echo "debian_root: FAIL: $*" >&2; exit 1; }

# Mounts made in a mount namespace of the test's own vanish with it, however
# it ends (ctest kills a test that overruns its TIMEOUT).
if [[ -z ${SOFTRDMA_DEBIAN_ROOT_NS:-} ]]; then
  [[ $(id -u) -eq 0 ]] || fail "needs root (mmdebstrap, chroot, mounts); CI runs tests as root"
  command -v mmdebstrap >/dev/null || fail "no mmdebstrap: run scripts/install-deps.sh"
  SOFTRDMA_DEBIAN_ROOT_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi

work=$(mktemp -d /tmp/softrdma-debian-root.XXXXXX)
trap 'umount -R "$work/root" 2>/dev/null; rm -rf "$work"' EXIT
m=$work/root          # the merged view the chroot sees
started=$SECONDS

# Runs a command in the root with a clean environment, as an admin's shell would.
in_root() {
  chroot "$m" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

make_package() {
  local t=$SECONDS
  (cd "$build" && cpack -B "$work/out" > "$work/cpack.log" 2>&1) ||
    { cat "$work/cpack.log"; fail "cpack failed"; }
  deb=$work/out/softrdma_${version}_$(dpkg --print-architecture).deb
  [[ -f $deb ]] || fail "cpack made no $deb"
  echo "debian_root: cpack made $(basename "$deb") in $((SECONDS - t)) s"
}

# The cached root under an overlay, with /proc, /sys, /dev and a /dev/shm of its
# own (softrdma's node segments must not meet the host's).
mount_root() {
  local t=$SECONDS base
  base=$("$here/../../packaging/debian-root.sh") || fail "no Debian root (packaging/debian-root.sh)"
  echo "debian_root: root ready in $((SECONDS - t)) s: $base"
  mkdir -p "$work/upper" "$work/overlay" "$m"
  mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/overlay" "$m"
  mount -t proc proc "$m/proc"
  mount -t sysfs sysfs "$m/sys"
  mount --rbind /dev "$m/dev"
  mount -t tmpfs tmpfs "$m/dev/shm"
}

# Package names in a Depends field, alternatives and versions dropped.
depends_names() {
  dpkg-deb -f "$1" Depends | tr ',|' '\n' | sed -E 's/\(.*\)//; s/:any//; s/ //g' | sed '/^$/d' | sort -u
}

installed() { [[ $(in_root dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

# apt-get install of the .deb; apt fetches what it Depends on and the root lacks.
# Package lists older than a mirror update name files the mirror no longer has:
# then the lists are refreshed once and the install tried again.
install_package() {
  local t=$SECONDS missing=()
  for pkg in $(depends_names "$deb"); do installed "$pkg" || missing+=("$pkg"); done
  cp "$deb" "$m/tmp/"
  local cmd=(apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")")
  if ! in_root "${cmd[@]}" > "$work/apt.log" 2>&1; then
    echo "debian_root: apt-get install failed; refreshing the root's package lists and retrying"
    in_root apt-get update -q >> "$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get update"; }
    in_root "${cmd[@]}" >> "$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install ./$(basename "$deb")"; }
  fi
  rm "$m/tmp/$(basename "$deb")"
  installed softrdma || fail "softrdma not installed: $(in_root dpkg-query -W softrdma 2>&1)"
  for pkg in "${missing[@]}"; do installed "$pkg" || fail "Depends $pkg not installed"; done
  echo "debian_root: apt installed softrdma and its missing Depends (${missing[*]:-none}) in $((SECONDS - t)) s"
}

run_clients() {
  local t=$SECONDS
  [[ $(in_root softrdma --version) == "softrdma $version" ]] || fail "--version: $(in_root softrdma --version)"
  mkdir "$m/tmp/softrdma-test"
  cp "$here/run_clients.sh" "$m/tmp/softrdma-test/"
  in_root /bin/bash /tmp/softrdma-test/run_clients.sh softrdma "$version" "$port" /tmp/softrdma-test ||
    fail "clients in the root"
  rm -rf "$m/tmp/softrdma-test"
  # The installed doctor: no problem in the root, and its verdict on the sysfs view
  # is the one `softrdma run` meets there (the root is an overlay, a mount point).
  local doctor
  doctor=$(in_root softrdma doctor) || fail "softrdma doctor found a problem in the root: $doctor"
  grep -q '^ok *device ' <<< "$doctor" && grep -q '/usr/lib/softrdma$' <<< "$doctor" ||
    fail "doctor on the device: $doctor"
  grep -q '^ok *sysfs view' <<< "$doctor" || fail "doctor on the sysfs view: $doctor"
  echo "debian_root: clients ran in $((SECONDS - t)) s"
}

# dpkg-query knows a purged package no more, or as "un" (unknown, not installed).
purged() {
  local status
  status=$(in_root dpkg-query -W -f='${db:Status-Abbrev}' softrdma 2>/dev/null) || return 0
  [[ $status == un* ]]
}

# What `dpkg -L` listed is gone, but for directories other packages own (/usr/bin).
check_gone() {
  local path left=()
  while IFS= read -r path; do
    [[ $path == /. ]] && continue
    [[ -e $m$path || -L $m$path ]] || continue
    [[ -d $m$path ]] && in_root dpkg-query -S "$path" > /dev/null 2>&1 && continue
    left+=("$path")
  done < "$work/files"
  ((${#left[@]} == 0)) || fail "$1 left: ${left[*]}"
}

remove_package() {
  local t=$SECONDS
  in_root dpkg-query -L softrdma > "$work/files"
  in_root apt-get remove -y -q softrdma > "$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get remove"; }
  check_gone "apt-get remove"
  in_root apt-get purge -y -q softrdma > "$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get purge"; }
  check_gone "apt-get purge"
  purged || fail "dpkg still knows softrdma after purge"
  # The overlay's upper directory holds every file the test created, the root's
  # /dev/shm every segment the programs made: none may be named after softrdma
  # (dpkg's file lists, a node segment a program did not remove at exit).
  local stray
  stray=$( (cd "$work/upper" && find . -path '*softrdma*'); find "$m/dev/shm" -name '*softrdma*')
  [[ -z $stray ]] || fail "left in the root: $stray"
  echo "debian_root: removed and purged; none of its $(wc -l < "$work/files") paths left ($((SECONDS - t)) s)"
}

make_package
mount_root
install_package
run_clients
remove_package
echo "debian_root: $(basename "$deb") installed, ran, removed in a clean Debian 12 root; $((SECONDS - started)) s in all"
