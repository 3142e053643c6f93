#!/usr/bin/env bash
# Builds the softrdma container image without a registry (issue 17;
# docs/containers.md): the Debian 12 root of packaging/debian-root.sh (mmdebstrap,
# Debian's packages, cached) is imported into podman as the base image once per
# root, then packaging/Containerfile installs the given .deb on it with apt.
#   packaging/build-image.sh DEB [IMAGE]     IMAGE default: localhost/softrdma:VERSION
# Prints the image's name on the last line. Needs root (mmdebstrap, rootful podman).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=podman-settings.sh
source "$here/podman-settings.sh"
fail() { echo "build-image: $*" >&2; exit 1; }

[[ $# -ge 1 && -f $1 ]] || fail "usage: build-image.sh SOFTRDMA.deb [IMAGE]"
deb=$(realpath "$1")
image=${2:-localhost/softrdma:$(dpkg-deb -f "$deb" Version)}
command -v podman > /dev/null || fail "no podman: apt-get install podman runc (scripts/install-deps.sh)"

# The cached root as image localhost/softrdma-debian12:KEY. /dev, /proc and /sys
# go in empty: the container runtime mounts them. Older roots' images go.
import_base() {
  local root key base
  root=$("$here/debian-root.sh") || fail "no Debian root"
  key=$("$here/debian-root.sh" --key)
  base=localhost/softrdma-debian12:$key
  if ! "${podman[@]}" image exists "$base"; then
    echo "build-image: importing $root as $base" >&2
    tar -C "$root" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . |
      "${podman[@]}" import --quiet - "$base" > /dev/null || fail "podman import"
  fi
  "${podman[@]}" images --format '{{.Repository}}:{{.Tag}}' localhost/softrdma-debian12 |
    grep -vx "$base" | xargs -r "${podman[@]}" rmi > /dev/null 2>&1 || true
  echo "$base"
}

# Host networking for the build: its one download (the .deb's Depends) goes
# to the mirror as the host's apt would, with no bridge or firewall involved.
build() {
  local base=$1 context
  context=$(mktemp -d /tmp/softrdma-image.XXXXXX)
  trap 'rm -rf "$context"' RETURN
  cp "$deb" "$context/"
  "${podman[@]}" build --network=host "${podman_limits[@]}" --build-arg "BASE=$base" \
    -f "$here/Containerfile" -t "$image" "$context" > "$context/build.log" 2>&1 ||
    { cat "$context/build.log" >&2; fail "podman build"; }
}

base=$(import_base)
build "$base"
echo "$image"
