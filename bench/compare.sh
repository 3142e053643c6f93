#!/usr/bin/env bash
# softrdma beside UCX over TCP, libfabric over TCP and the UDP floors, in one run
# (issue 6). Installs what is missing, builds the release tree, then runs
# bench/compare.py, which writes the table into docs/performance.md and the plots
# into docs/. Options go to compare.py: --rounds N (default 3), --quick,
# --no-write, --build DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh
generator=()
if [[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --parallel "${SOFTRDMA_JOBS:-2}"
# Debian's python3 (matplotlib from python3-matplotlib), whatever python3 is first on PATH.
exec /usr/bin/python3 bench/compare.py "$@"
