#!/usr/bin/env bash
# softrdma against the Linux kernel's Soft-RoCE and SoftiWARP in a VM (the
# repository's tests/peer-vm/, docs/decisions/peer-vm.md): every case both ways,
# every capture checked (RoCEv2 ICRCs; iWARP's MPA/DDP/RDMAP and CRCs); one line
# per case and direction. Builds what it needs first (the release build in
# $SOFTRDMA_BUILD_DIR, default build/; the guest's kernel and initramfs, in
# ~/.cache/softrdma-peer-vm). Arguments go to scripts/interop.py (--subset ci,
# --only REGEX, --table FILE ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${SOFTRDMA_JOBS:-2}
build_dir=${SOFTRDMA_BUILD_DIR:-build}
export SOFTRDMA_BUILD_DIR=$build_dir  # interop.py runs $build_dir/tools/softrdma
peer_vm=${SOFTRDMA_PEER_VM:-tests/peer-vm}  # another harness with the same interface
if [[ ! -x $peer_vm/run-guest.sh ]]; then
  echo "interop: no peer VM harness at $peer_vm (set SOFTRDMA_PEER_VM)" >&2
  exit 2
fi
if [[ ${SOFTRDMA_INTEROP_NO_BUILD:-0} != 1 ]]; then
  bash scripts/install-deps.sh
  launcher=()  # ccache as scripts/test.sh uses it (its head says why)
  if [[ ${SOFTRDMA_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
  fi
  cmake --build "$build_dir" --parallel "$jobs" --target softrdma softrdma_ibverbs softrdma_rdmacm \
    softrdma_mlx5_stub softrdma_efa_stub
fi
"$peer_vm/build.sh"
exec python3 scripts/interop.py "$@"
