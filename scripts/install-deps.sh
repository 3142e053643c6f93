#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test softrdma.
#
# Idempotent and fast on a prepared machine: apt runs only if some package is
# missing (checked with dpkg-query), and then `apt-get update` runs once.
# Works as root without a terminal (CI) and through sudo otherwise.
# docs/dependencies.md says why each package is here.
#
#   install-deps.sh           everything: build, tests, benchmarks, interop
#   install-deps.sh --build   only what building the drop-ins and the package
#                             needs (scripts/install.sh, a user's install)
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config  # build-essential brings dpkg-dev:
                                                # dpkg-shlibdeps finds the .deb's Depends
  file                                          # CPack's SHLIBDEPS runs file(1) on each binary
  libisal-dev zlib1g-dev libibverbs-dev librdmacm-dev libcli11-dev
)

packages=(
  # Build
  build-essential cmake ninja-build pkg-config binutils
  file                                # CPack's SHLIBDEPS (the .deb's Depends) runs file(1)
  libisal-dev                         # crc32_gzip_refl(): the ICRC's CRC-32 (carry-less multiply)
  zlib1g-dev                          # crc32(): the reference CRC-32 for tests and tools
  libdeflate-dev                      # bench/crc_bench: the CRC-32 libraries compared
  libibverbs-dev librdmacm-dev        # verbs/rdma_cm headers (the library never links theirs)
  libcli11-dev                        # CLI11: the traffic tool's command-line options
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  clang libclang-rt-14-dev            # libFuzzer (-fsanitize=fuzzer) for the parser
  python3                             # scripts/gen-version-script.py, pyverbs suite
  # Test: real clients and tools the conformance and capture tests start
  tshark tcpdump                      # tcpdump: the iWARP capture (TCP, which SOFTRDMA_PCAP does not write)
  ibverbs-utils perftest rdmacm-utils python3-pyverbs
  ucx-utils libucx0                   # ucx_info, ucx_perftest: UCX on softrdma0 (and bench/compare.sh)
  libucx-dev                          # tests/conformance/ucx_sockaddr.c: UCX client/server over rdma_cm
  openmpi-bin libopenmpi-dev          # tests/conformance/mpi_fabric.sh: Open MPI jobs (UCX rc_verbs, OFI verbs) on the test bed
  iproute2 procps
  gdb                                 # run_client.py: a backtrace of a client that died of a signal (its core)
  iptables                            # scripts/interop.py: TCP loss for the iWARP cases (statistic match)
  libnetfilter-queue-dev              # tests/support/fabric_switch: the test bed's ECN-marking bottleneck (NFQUEUE)
  # Interop (tests/peer-vm/, docs/decisions/peer-vm.md): the kernel's rxe and siw in a QEMU guest
  qemu-system-x86                     # the guest, under TCG emulation (no usable KVM on the CI machines)
  busybox-static                      # the guest's shell and applets: its initramfs holds no libc of its own
  cpio kmod                           # the initramfs archive; depmod/modprobe -d: the modules' load order
  linux-headers-amd64                 # siw.ko, built out of tree: Debian's kernel has no CONFIG_RDMA_SIW
  xz-utils                            # unpacks the siw sources out of Debian's linux-source tarball
  ccache                              # scripts/test.sh: compiler cache for the two builds (CI wall time)
  ethtool                             # KernelFacts.GsoSegments...: segmentation offload off on a veth
  # Package tests (label `package`): the .deb in a clean Debian root and in containers
  mmdebstrap debian-archive-keyring   # the clean Debian 12 root, from Debian's signed packages
  podman runc                         # the image and the two containers (runc: crun refuses hybrid cgroups)
  containernetworking-plugins         # podman's bridge network between the containers (only recommended)
  python3-yaml                        # tests/install/k8s_pods.py: reads the Kubernetes example's pods
  # Benchmark (bench/compare.sh): the peers and the plots
  libfabric-bin python3-matplotlib
  valgrind                            # bench/verb_instructions.sh: callgrind, valgrind/callgrind.h
)

if [[ ${1:-} == --build ]]; then
  packages=("${build_packages[@]}")
fi

missing=()
for pkg in "${packages[@]}"; do
  # db:Status-Status is "installed" only for a fully installed package (not for
  # one that was removed with its config files left, or half-configured).
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"

# Root runs apt directly; anyone else goes through sudo (which may ask for a
# password when there is a terminal).
if [[ $(id -u) -eq 0 ]]; then
  as_root=(env)
elif command -v sudo >/dev/null; then
  as_root=(sudo env)
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
as_root+=(DEBIAN_FRONTEND=noninteractive)

# tshark's postinst asks whether non-root users may capture; answer "no" ahead of
# time so no prompt can block a run without a terminal.
if [[ " ${missing[*]} " == *" tshark "* ]]; then
  echo "wireshark-common wireshark-common/install-setuid boolean false" |
    "${as_root[@]}" debconf-set-selections
fi

"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  "${missing[@]}"
echo "install-deps: done"
