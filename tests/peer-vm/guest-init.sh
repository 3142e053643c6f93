#!/bin/sh
# The guest's /init (busybox sh). It brings up eth0 and one kernel RDMA device on it,
# runs the command the host left in its run directory (shared over virtio-9p, tag
# "run", mounted at /mnt/run), writes the command's exit status there and powers
# off. Settings come on the kernel command line from run-guest.sh:
#   peervm.ip=ADDR/PREFIX  peervm.host=ADDR  peervm.mtu=N  peervm.driver=rxe|siw
#   peervm.share=0|1 (a second 9p share, tag "share", at /mnt/share)
export PATH=/usr/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
# The crypto API loads "crc32"/"crc32c" through request_module: busybox's modprobe.
echo /usr/bin/modprobe >/proc/sys/kernel/modprobe

log() { echo "peer-vm guest: $*" >/dev/console; }
halt() { sync; poweroff -f; }

ip=10.77.0.2/24 host=10.77.0.1 mtu=1500 driver=rxe share=0
for word in $(cat /proc/cmdline); do
  case $word in
    peervm.ip=*) ip=${word#*=} ;;
    peervm.host=*) host=${word#*=} ;;
    peervm.mtu=*) mtu=${word#*=} ;;
    peervm.driver=*) driver=${word#*=} ;;
    peervm.share=*) share=${word#*=} ;;
  esac
done

while read -r module; do
  insmod "$module" || log "insmod $module failed"
done </etc/modules.order

# 9p2000.L with a large msize: the host reads the command's output from here.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 run /mnt/run ||
  { log "no run directory from the host"; halt; }
if [ "$share" = 1 ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /mnt/share ||
    log "no share from the host"
fi
finish() { echo "$1" >/mnt/run/rc; umount /mnt/run; halt; }

ip link set lo up
ip link set eth0 mtu "$mtu" && ip addr add "$ip" dev eth0 && ip link set eth0 up ||
  { log "eth0 failed"; finish 125; }
device=${driver}0
rdma link add "$device" type "$driver" netdev eth0 || { log "rdma link add failed"; finish 125; }

# The port follows eth0's carrier; wait for ACTIVE (5 s at most).
n=0
until grep -q ACTIVE "/sys/class/infiniband/$device/ports/1/state"; do
  n=$((n + 1)); [ $n -gt 100 ] && { log "$device never became ACTIVE"; finish 125; }
  sleep 0.05
done

# RoCEv2 GIDs: the IPv4 one (::ffff:a.b.c.d) is listed once eth0 has its address;
# its index is what the pingpong tools take with -g (1, after fe80:: at 0).
guest=${ip%/*}
gid_v4=
if [ "$driver" = rxe ]; then
  want=$(echo "$guest" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
  n=0
  while [ -z "$gid_v4" ] && [ $n -lt 100 ]; do
    for index in 0 1 2 3 4 5 6 7; do
      [ "$(cat "/sys/class/infiniband/$device/ports/1/gids/$index")" = "$want" ] &&
        { gid_v4=$index; break; }
    done
    n=$((n + 1)); [ -n "$gid_v4" ] || sleep 0.05
  done
fi
log "$device ready, guest $guest, host $host, IPv4 GID index ${gid_v4:-none}, uptime $(cut -d' ' -f1 /proc/uptime) s"

# The command's environment (names interop.py's commands use).
export GUEST_IP=$guest HOST_IP=$host RXE_DEV=$device RXE_GID_V4=$gid_v4
cd /mnt/run
sh ./cmd.sh </dev/null >out.txt 2>&1
rc=$?
log "command exited $rc, uptime $(cut -d' ' -f1 /proc/uptime) s"
cd /
finish "$rc"
