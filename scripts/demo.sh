#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds the release
# build (build/, the same configuration as scripts/test.sh) and runs
# build/tools/softrdma-demo: two processes exchange data over UDP loopback with
# every RC operation and print what moved and how fast. Arguments go to it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${SOFTRDMA_JOBS:-2}
demo=build/tools/softrdma-demo

bash scripts/install-deps.sh

# Ninja when there is one, unless build/ was configured before (CMake refuses
# to switch generators in an existing build directory).
generator=()
if [[ ! -f build/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release

# Only what the demo needs, not the tests and benchmarks.
if ! cmake --build build --parallel "$jobs" --target softrdma-demo || [[ ! -x $demo ]]; then
  echo "demo.sh: could not build $demo (CMake target softrdma-demo in tools/)" >&2
  exit 1
fi

echo "=== $demo $*"
exec "$demo" "$@"
