#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds the release
# build (build/, the same configuration as scripts/test.sh) and runs
# 1. build/tools/softrdma-demo: two verbs processes (softrdma-traffic-node, the
#    integration tests' oracle), started through `softrdma run` on the drop-in
#    libibverbs.so.1, exchange data (same-host path, or RoCEv2 over UDP loopback
#    with faults) with every RC operation, check every byte and completion; the
#    demo prints what moved and how fast (arguments go to it:
#    --transport=uc|ud|srq, --loss=P, ...);
# 2. scripts/perftest_table.py: Debian's unmodified perftest tools (write, read,
#    send, atomic; bandwidth and latency) between two processes on softrdma's
#    drop-in libibverbs.so.1, as one table.
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

# The demo and every drop-in library and tool the README then shows
# (softrdma-dropins: `softrdma`, libibverbs.so.1, librdmacm.so.1 for rping and
# rstream, the vendor stubs perftest links), not the tests and benchmarks.
if ! cmake --build build --parallel "$jobs" --target softrdma-demo softrdma-dropins \
    || [[ ! -x $demo ]]; then
  echo "demo.sh: could not build $demo and the drop-in libraries and tools" >&2
  exit 1
fi

echo "=== $demo $*"
"$demo" "$@"
echo
echo "=== perftest (Debian's binaries, unmodified) on softrdma: build/tools/softrdma run -- ib_*"
python3 scripts/perftest_table.py --softrdma build/tools/softrdma
