#!/bin/sh
# check_capture.sh FILE.pcap [MIN_PACKETS]
#
# Verifies the RoCEv2 packets (UDP destination port 4791) of a capture, e.g. one
# written through SOFTRDMA_PCAP, with tshark:
#   1. tshark dissects every one of them as InfiniBand (a BTH was decoded);
#   2. none is malformed and none raises an expert warning or error;
#   3. every ICRC is good. tshark (4.0) shows the ICRC but does not verify it, so
#      it is recomputed here (IBA Annex A17.3.3, python3 zlib.crc32) from the
#      IP/UDP fields and the UDP payload as tshark decoded them: independent of
#      softrdma's own ICRC code.
# and that there are at least MIN_PACKETS (default 1) of them.
# Exit status: 0 all good, 1 a check failed, 2 cannot run (no tshark/python3).
# Prints one summary line; the frames that fail are listed.
set -eu

if [ $# -lt 1 ]; then
  echo "usage: $0 FILE.pcap [MIN_PACKETS]" >&2
  exit 2
fi
file=$1
min=${2:-1}
for tool in tshark python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check_capture: $tool not found" >&2
    exit 2
  fi
done
if [ ! -r "$file" ]; then
  echo "check_capture: cannot read $file" >&2
  exit 2
fi

# tshark's InfiniBand dissector hands every payload to heuristic dissectors of
# upper-layer protocols (RPC-over-RDMA, Mellanox EoIB, iSER ...), which guess from
# the payload bytes; on a zero-length SEND or an arbitrary payload some of them
# throw and the frame is reported "[Malformed Packet: RPCoRDMA]" even in Linux
# Soft-RoCE's own captures. The transport is what is checked here: disable those
# guessers (the ones this tshark has; one --disable-protocol per name), and the
# Ethernet-over-InfiniBand heuristic, which takes a SEND payload starting 0x90 for
# an Ethernet frame ("[Malformed Packet: LOOP]").
disable=""
known=$(tshark -G protocols 2>/dev/null | cut -f3)
for proto in rpcordma infiniband.eoib iser nvme-rdma smb_direct smc lnet infiniband_sdp fcoib; do
  if echo "$known" | grep -qx "$proto"; then disable="$disable --disable-protocol $proto"; fi
done
# -d makes the decoding explicit (4791 is also tshark's default RRoCE port).
tshark_roce() {
  # shellcheck disable=SC2086 # $disable is a list of options
  tshark -r "$file" $disable --disable-heuristic eth_over_ib -d udp.port==4791,infiniband "$@" 2>/dev/null
}
# Frames matching display filter $1. A tshark that fails (unreadable file, broken
# profile ...) ends the script with status 2: set -e applies to "var=$(count ...)".
count() {
  if ! frames=$(tshark_roce -Y "$1" -T fields -e frame.number); then
    echo "check_capture: tshark failed on $file (filter: $1)" >&2
    exit 2
  fi
  printf '%s\n' "$frames" | grep -c . || true
}

total=$(count 'udp.dstport == 4791')
undissected=$(count 'udp.dstport == 4791 && !infiniband.bth')
malformed=$(count 'udp.dstport == 4791 && (_ws.malformed || _ws.expert.severity >= warning)')

icrc_report=$(tshark_roce -Y 'udp.dstport == 4791' -T fields -E separator=/t -E occurrence=f \
  -e frame.number -e ip.src -e ip.dst -e ip.id -e ip.flags.df -e ip.hdr_len \
  -e ip.frag_offset -e ipv6.src -e ipv6.dst -e udp.srcport -e udp.dstport -e udp.payload |
python3 -c '
import ipaddress, sys, zlib

def icrc_input(f, payload):
    """IBA A17.3.3: 8 bytes of ones (the LRH), IP header with TOS/TTL/checksum
    (IPv6: traffic class/flow label/hop limit) as ones, UDP header with the
    checksum as ones, BTH with byte 4 as ones, the rest up to the ICRC."""
    number, src4, dst4, ip_id, df, hdr_len, frag, src6, dst6, sport, dport = f
    udp_len = 8 + len(payload)
    udp = int(sport).to_bytes(2, "big") + int(dport).to_bytes(2, "big") + \
          udp_len.to_bytes(2, "big") + b"\xff\xff"
    if src4:
        if hdr_len != "20" or frag not in ("", "0"):
            return None
        flags = 0x4000 if df in ("1", "True") else 0
        ip = bytes([0x45, 0xff]) + (20 + udp_len).to_bytes(2, "big") + \
             int(ip_id, 16).to_bytes(2, "big") + flags.to_bytes(2, "big") + \
             b"\xff\x11\xff\xff" + ipaddress.IPv4Address(src4).packed + \
             ipaddress.IPv4Address(dst4).packed
    else:
        ip = b"\x6f\xff\xff\xff" + udp_len.to_bytes(2, "big") + b"\x11\xff" + \
             ipaddress.IPv6Address(src6).packed + ipaddress.IPv6Address(dst6).packed
    bth = bytearray(payload[:12])
    bth[4] = 0xff
    return b"\xff" * 8 + ip + udp + bytes(bth) + payload[12:-4]

good = bad = 0
for line in sys.stdin:
    f = line.rstrip("\n").split("\t")
    if len(f) < 12:
        continue
    payload = bytes.fromhex(f[11].replace(":", ""))
    data = icrc_input(f[:11], payload) if len(payload) >= 16 else None
    stored = int.from_bytes(payload[-4:], "little") if len(payload) >= 4 else None
    if data is not None and zlib.crc32(data) == stored:
        good += 1
    else:
        bad += 1
        want = "n/a" if data is None else "0x%08x" % zlib.crc32(data)
        print("check_capture: frame %s: bad ICRC (stored 0x%08x, computed %s)"
              % (f[0], stored or 0, want))
print("ICRC_GOOD=%d ICRC_BAD=%d" % (good, bad))
')
echo "$icrc_report" | grep -v '^ICRC_GOOD=' || true
good=$(echo "$icrc_report" | sed -n 's/^ICRC_GOOD=\([0-9]*\) .*/\1/p')
bad=$(echo "$icrc_report" | sed -n 's/.*ICRC_BAD=\([0-9]*\)$/\1/p')

if [ "$undissected" -ne 0 ]; then
  tshark_roce -Y 'udp.dstport == 4791 && !infiniband.bth' |
    sed 's/^/check_capture: not InfiniBand: /'
fi
if [ "$malformed" -ne 0 ]; then
  tshark_roce -Y 'udp.dstport == 4791 && (_ws.malformed || _ws.expert.severity >= warning)' |
    sed 's/^/check_capture: malformed or expert warning: /'
fi

echo "check_capture: $file: $total RoCEv2 packets, $undissected not dissected as InfiniBand," \
     "$malformed malformed/warned, $good ICRC good, $bad ICRC bad"
if [ "$total" -lt "$min" ] || [ "$undissected" -ne 0 ] || [ "$malformed" -ne 0 ] ||
   [ "$bad" -ne 0 ] || [ "$good" -ne "$total" ]; then
  exit 1
fi
exit 0
