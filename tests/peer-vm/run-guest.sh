#!/usr/bin/env bash
# run-guest.sh 'GUEST COMMAND': one boot of the peer VM (build.sh's kernel and
# initramfs), the command run in it, and everything torn down again. Root only.
#
#   network namespace peervm-PID: tap0 10.77.0.1/24 (the host side: softrdma)
#   QEMU guest (TCG): eth0 10.77.0.2/24, rxe0 (RoCEv2) or siw0 (iWARP) on it
#
# Prints the guest command's output, then a line "== host command output (rc=N) =="
# and the host command's, and exits with the guest command's status (124 when
# RXE_TIMEOUT ran out, 125 when the guest never ran it; a guest that did not boot
# within RXE_BOOT_TIMEOUT also prints "run-guest.sh: the guest did not boot").
#
# The guest command runs under busybox sh in the run directory (the host's
# $RXE_RUNDIR, shared over 9p), with GUEST_IP, HOST_IP, RXE_DEV (rxe0 or siw0)
# and RXE_GID_V4 (the index of the IPv4 GID; rxe only) set. Settings:
#   RXE_HOST_CMD    run with sh -c in the namespace, in its own process group, from
#                   before the guest boots; output to $RXE_RUNDIR/host.out. It sees
#                   HOST_IP, GUEST_IP, RXE_RUNDIR.
#   RXE_HOST_GRACE  seconds the host command may run on after the guest is off (3)
#   RXE_TIMEOUT     seconds for boot and command together (120)
#   RXE_BOOT_TIMEOUT  seconds until the guest's device is ready (90; an idle boot
#                   takes about 5 under TCG, a rare one hangs with no output)
#   RXE_MTU         of eth0 and tap0 (1500; rxe's active MTU is then 1024, 9000 gives 4096)
#   RXE_DRIVER      rxe (Soft-RoCE, default) or siw (SoftiWARP)
#   RXE_SHARE       a host directory, at /mnt/share in the guest
#   SOFTRDMA_PEER_VM_CACHE  build.sh's cache (~/.cache/softrdma-peer-vm)
set -uo pipefail

(($# == 1)) || { sed -n '2,24p' "$0" | cut -c3-; exit 2; }
((EUID == 0)) || { echo "run-guest.sh: needs root (network namespace, tap)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${SOFTRDMA_PEER_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softrdma-peer-vm}
host_ip=10.77.0.1 guest_ip=10.77.0.2
mtu=${RXE_MTU:-1500} driver=${RXE_DRIVER:-rxe}
timeout=${RXE_TIMEOUT:-120} grace=${RXE_HOST_GRACE:-3} boot_timeout=${RXE_BOOT_TIMEOUT:-90}
ns=peervm-$$

"$here/build.sh" || { echo "run-guest.sh: build.sh failed" >&2; exit 125; }

rundir=$(mktemp -d /tmp/peervm-run.XXXXXX)
chmod 755 "$rundir"
qemu_pid= host_pid=

# stop PID [GROUP]: TERM, two seconds, then KILL; GROUP: the whole process group.
stop() {
  local pid=$1 target=$1 n=0
  [[ -n $pid ]] || return 0
  [[ -n ${2:-} ]] && target=-$pid
  kill -TERM -- "$target" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && ((n++ < 20)); do sleep 0.1; done
  kill -KILL -- "$target" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}
teardown() {
  stop "$qemu_pid"
  stop "$host_pid" group
  ip netns del "$ns" 2>/dev/null
  rm -rf "$rundir"
}
trap teardown EXIT
trap 'exit 130' INT TERM HUP

in_ns=(ip netns exec "$ns")
ip netns add "$ns" || exit 125
"${in_ns[@]}" ip link set lo up
"${in_ns[@]}" ip tuntap add dev tap0 mode tap &&
  "${in_ns[@]}" ip link set tap0 mtu "$mtu" &&
  "${in_ns[@]}" ip addr add "$host_ip/24" dev tap0 &&
  "${in_ns[@]}" ip link set tap0 up || exit 125
# No router solicitations from the host side: the captures hold only the test.
"${in_ns[@]}" sysctl -qw net.ipv6.conf.tap0.accept_ra=0

if [[ -n ${RXE_HOST_CMD:-} ]]; then
  HOST_IP=$host_ip GUEST_IP=$guest_ip RXE_RUNDIR=$rundir \
    setsid "${in_ns[@]}" sh -c "$RXE_HOST_CMD" </dev/null >"$rundir/host.out" 2>&1 &
  host_pid=$!
fi

printf '%s\n' "$1" >"$rundir/cmd.sh"
share=0 share_dev=()
if [[ -n ${RXE_SHARE:-} ]]; then
  share=1
  share_dev=(-virtfs "local,path=$(realpath "$RXE_SHARE"),mount_tag=share,security_model=none,id=share")
fi
# TCG unless the host has real hardware virtualisation: a /dev/kvm of kvm_pvm
# (nested PVM, as on this project's machines) hangs a stock kernel at boot.
accel=(-accel tcg,thread=multi -cpu max)
if [[ -w /dev/kvm && ( -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ) ]]; then
  accel=(-accel kvm -cpu host)
fi
started=$SECONDS
"${in_ns[@]}" qemu-system-x86_64 "${accel[@]}" -m 512 -smp 2 \
  -nodefaults -no-user-config -nographic -no-reboot \
  -kernel "$cache/vmlinuz" -initrd "$cache/initramfs.gz" \
  -append "console=ttyS0 quiet panic=-1 peervm.ip=$guest_ip/24 peervm.host=$host_ip peervm.mtu=$mtu peervm.driver=$driver peervm.share=$share" \
  -serial "file:$rundir/console.log" \
  -netdev tap,id=net,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=net,mac=52:54:00:77:00:02,romfile= \
  -virtfs "local,path=$rundir,mount_tag=run,security_model=none,id=run" \
  "${share_dev[@]}" </dev/null >"$rundir/qemu.log" 2>&1 &
qemu_pid=$!

# guest-init.sh logs "peer-vm guest: DEV ready" (or why not) before the command.
timed_out=0 booted=0 boot_hung=0
while kill -0 "$qemu_pid" 2>/dev/null; do
  if ((SECONDS - started >= timeout)); then timed_out=1; break; fi
  if ((!booted)); then
    if grep -qs "peer-vm guest: " "$rundir/console.log"; then
      booted=1
    elif ((SECONDS - started >= boot_timeout)); then
      boot_hung=1; break
    fi
  fi
  sleep 0.1
done
stop "$qemu_pid"
qemu_pid=

host_rc=
if [[ -n $host_pid ]]; then
  n=0
  while kill -0 "$host_pid" 2>/dev/null && ((n++ < grace * 10)); do sleep 0.1; done
  if kill -0 "$host_pid" 2>/dev/null; then
    stop "$host_pid" group
    host_rc=killed
  else
    wait "$host_pid"
    host_rc=$?
  fi
  host_pid=
fi

rc=$(cat "$rundir/rc" 2>/dev/null)
cat "$rundir/out.txt" 2>/dev/null
if [[ -n ${RXE_HOST_CMD:-} ]]; then
  echo "== host command output (rc=$host_rc) =="
  cat "$rundir/host.out"
fi
if ((boot_hung)); then
  echo "run-guest.sh: the guest did not boot within ${boot_timeout}s" >&2
  rc=125
fi
if ((timed_out || boot_hung)) || [[ -z $rc || $rc == 125 ]]; then
  echo "== guest console ==" >&2
  tr -d '\r' <"$rundir/console.log" >&2
  cat "$rundir/qemu.log" >&2
fi
echo "run-guest.sh: ${SECONDS}s in all, guest status ${rc:-none}$( ((timed_out)) && echo ", timed out after ${timeout}s")" >&2
((timed_out)) && exit 124
exit "${rc:-125}"
