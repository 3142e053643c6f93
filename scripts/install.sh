#!/usr/bin/env bash
# The user's install (README "Quick start"): builds softrdma's Debian package from
# this clone and installs it with apt, which brings its dependencies; then
# `softrdma` is on PATH and its libraries are in /usr/lib/softrdma/, beside the
# system's, never over them (docs/decisions/installation.md).
#
# Builds in build-package/: release, without tests or benchmarks (a few minutes
# on two cores). Needs root or sudo for apt. `apt remove softrdma` undoes it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${SOFTRDMA_JOBS:-$(nproc)}
dir=build-package

bash scripts/install-deps.sh --build

generator=()
if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
  -DSOFTRDMA_BUILD_BENCH=OFF
cmake --build "$dir" --parallel "$jobs"
rm -f "$dir"/softrdma_*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
package=$(ls "$dir"/softrdma_*.deb)

as_root=()
if [[ $(id -u) -ne 0 ]]; then as_root=(sudo); fi
# apt needs a path with a slash to take a file rather than a package name.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "./$package"
echo "install: $(softrdma --version) installed from $package; try: softrdma doctor"
