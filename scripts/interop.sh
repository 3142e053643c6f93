#!/usr/bin/env bash
# softrdma against the Linux kernel's Soft-RoCE in a VM (../shared/linux-peer-vm):
# every case both ways, every packet's ICRC checked; one line per case and
# direction. Builds what it needs first (release build/, the peer VM's cache).
# Arguments go to scripts/interop.py (--subset ci, --only REGEX, --table FILE ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${SOFTRDMA_JOBS:-2}
peer_vm=${SOFTRDMA_PEER_VM:-../shared/linux-peer-vm}
if [[ ! -x $peer_vm/run-guest.sh ]]; then
  echo "interop: no peer VM harness at $peer_vm (set SOFTRDMA_PEER_VM)" >&2
  exit 2
fi
if [[ ${SOFTRDMA_INTEROP_NO_BUILD:-0} != 1 ]]; then
  bash scripts/install-deps.sh
  if [[ ! -f build/CMakeCache.txt ]]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build build --parallel "$jobs" --target softrdma softrdma_ibverbs softrdma_rdmacm \
    softrdma_mlx5_stub softrdma_efa_stub
fi
"$peer_vm/build.sh"
exec python3 scripts/interop.py "$@"
