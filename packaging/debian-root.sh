#!/usr/bin/env bash
# Prints the path of a clean Debian 12 root made by mmdebstrap from Debian's
# packages, building it first when the cache lacks it (issue 17;
# docs/decisions/containers.md). The clean-root test installs softrdma's .deb
# into an overlay over it, and packaging/build-image.sh imports it as the
# container image's base, so both start from the same root.
#
#   packaging/debian-root.sh          the path, e.g. ~/.cache/softrdma/debian-root/3f2a.../root
#   packaging/debian-root.sh --key    only the cache key (names the imported image too)
#
# The cache is keyed by everything that makes the root: suite, variant, package
# list, apt sources. A changed recipe gets a new directory and the old ones are
# removed. A build goes to a temporary directory renamed into place at the end,
# and a lock makes a second caller wait for the first, so a killed build leaves
# nothing half made and two tests never build it twice.
#
# Settings (environment): SOFTRDMA_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/softrdma),
# SOFTRDMA_DEBIAN_MIRROR (default http://deb.debian.org/debian) and
# SOFTRDMA_DEBIAN_SECURITY (default http://deb.debian.org/debian-security).
# Needs root (mmdebstrap's root mode: real ownership in the root, no subuids).
set -euo pipefail

suite=bookworm
variant=apt   # Essential: yes packages and apt: the smallest root apt works in
# What the tests run on softrdma, and `ss` (iproute2) to see a listener appear.
# softrdma's own Depends (libisal2, ...) are left out on purpose: apt must find them.
packages=(ibverbs-utils rdmacm-utils perftest iproute2)
mirror=${SOFTRDMA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${SOFTRDMA_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
sources=(
  "deb $mirror $suite main"
  "deb $mirror $suite-updates main"
  "deb $security $suite-security main"
)
cache=${SOFTRDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softrdma}/debian-root

fail() { echo "debian-root: $*" >&2; exit 1; }

# The recipe's hash: a changed package list or mirror is a different root.
recipe_key() {
  printf '%s\n' "$suite" "$variant" "${packages[@]}" "${sources[@]}" | sha256sum | cut -c1-16
}

# apt's proxy, when the host's apt uses one, so mmdebstrap reaches the mirror
# the way the host's apt does (an http_proxy in the environment apt reads itself).
proxy_options() {
  local proxy
  proxy=$(apt-config shell p Acquire::http::Proxy | sed -n "s/^p='\(.*\)'$/\1/p")
  [[ -z $proxy ]] || printf '%s\n' "--aptopt=Acquire::http::Proxy \"$proxy\""
}

# Builds the root into $1. --skip=cleanup/apt/lists keeps the package lists, so
# `apt install ./softrdma_*.deb` in the root resolves Depends without an update.
build_root() {
  local target=$1 options
  mapfile -t options < <(proxy_options)
  echo "debian-root: building $suite ($variant + ${packages[*]}) in $target" >&2
  mmdebstrap --mode=root --variant="$variant" --include="$(IFS=,; echo "${packages[*]}")" \
    --skip=cleanup/apt/lists "${options[@]}" "$suite" "$target" "${sources[@]}" \
    < /dev/null >&2
}

main() {
  local key
  key=$(recipe_key)
  if [[ ${1:-} == --key ]]; then echo "$key"; return; fi
  [[ $(id -u) -eq 0 ]] || fail "needs root (mmdebstrap --mode=root); run as root or with sudo"
  command -v mmdebstrap >/dev/null || fail "no mmdebstrap: apt-get install mmdebstrap (scripts/install-deps.sh)"

  local dir=$cache/$key
  mkdir -p "$cache"
  exec {lock}> "$cache/.lock"
  flock "$lock"
  if [[ ! -d $dir/root ]]; then
    local started=$SECONDS
    # Older recipes' roots, and what a killed build left.
    find "$cache" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
    mkdir -p "$dir.tmp"
    build_root "$dir.tmp/root" || fail "mmdebstrap failed"
    mv "$dir.tmp" "$dir"
    echo "debian-root: built in $((SECONDS - started)) s" >&2
  fi
  echo "$dir/root"
}

main "$@"
