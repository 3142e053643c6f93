#!/usr/bin/env python3
"""RoCEv2 captures of scripts/interop.py's cases, read again: every packet's ICRC
recomputed, and the RC traffic counted by direction.

    scripts/roce_capture.py run.pcap        # "N good ICRC, N bad", then the counts

Reads tcpdump's classic pcap of an Ethernet link (the peer VM's tap0). A packet is
RoCEv2 when it is UDP to port 4791 over IPv4 or IPv6 (RoCEv2 annex A17.4.2).
Which side sent a frame is told by its Ethernet source: the guest's MAC is fixed by
tests/peer-vm/run-guest.sh; every other frame is softrdma's (the host side).
"""
from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

GUEST_MAC = bytes.fromhex("525400770002")
ROCE_PORT = 4791
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
UDP = 17

# BTH opcodes of RC (IBA 9.2, table 38): what carries data, and the ACK.
RC_DATA = set(range(0x00, 0x0C)) | set(range(0x0D, 0x11)) | {0x16, 0x17}
RC_ACKNOWLEDGE = 0x11


def frames(pcap):
    """Each captured Ethernet frame's bytes (classic pcap, either timestamp magic)."""
    data = Path(pcap).read_bytes() if Path(pcap).exists() else b""
    if len(data) < 24 or struct.unpack("<I", data[:4])[0] not in (0xA1B2C3D4, 0xA1B23C4D):
        return
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack("<I", data[pos + 8:pos + 12])[0]
        yield data[pos + 16:pos + 16 + caplen]
        pos += 16 + caplen


def roce_packet(frame):
    """(masked IP and UDP headers, the rest from the BTH on) of a RoCEv2 frame, or None.
    The masks are the ICRC's (IBA A17.8): in IPv4 the type of service, TTL and header
    checksum, in IPv6 the traffic class, flow label and hop limit; the UDP checksum."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack(">H", frame[12:14])[0]
    if ethertype == ETH_IPV4 and len(frame) >= 34 and frame[23] == UDP:
        header_len = (frame[14] & 0x0F) * 4
        ip = frame[14:14 + struct.unpack(">H", frame[16:18])[0]]
        header = bytearray(ip[:header_len])
        header[1] = 0xFF
        header[8] = 0xFF
        header[10:12] = b"\xff\xff"
    elif ethertype == ETH_IPV6 and len(frame) >= 54 and frame[20] == UDP:
        header_len = 40
        ip = frame[14:14 + 40 + struct.unpack(">H", frame[18:20])[0]]
        header = bytearray(ip[:40])
        header[0] |= 0x0F
        header[1:4] = b"\xff\xff\xff"
        header[7] = 0xFF
    else:
        return None
    udp = bytearray(ip[header_len:header_len + 8])
    if len(udp) < 8 or struct.unpack(">H", udp[2:4])[0] != ROCE_PORT:
        return None
    udp[6:8] = b"\xff\xff"
    rest = ip[header_len + 8:]
    return (bytes(header) + bytes(udp), rest) if len(rest) >= 12 + 4 else None


def icrc_ok(masked_headers, rest):
    """IBA A17.8: CRC-32 over eight bytes of ones (the LRH RoCEv2 lacks), the masked
    IP and UDP headers, the BTH with its reserved byte set to ones and the payload;
    on the wire as the little-endian bytes of the standard CRC-32."""
    bth = bytearray(rest[:12])
    bth[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + masked_headers + bytes(bth) + rest[12:-4])
    return struct.pack("<I", crc) == rest[-4:]


def icrc_tally(pcap):
    """(good, bad): the RoCEv2 packets of the capture whose ICRC is right, wrong."""
    good = bad = 0
    for frame in frames(pcap):
        packet = roce_packet(frame)
        if packet is None:
            continue
        if icrc_ok(*packet):
            good += 1
        else:
            bad += 1
    return good, bad


def rc_traffic(pcap):
    """Counts of RC data and positive ACKs per side ("host", "guest"), and the NAKs
    (an ACK whose AETH syndrome is not an ACK: RNR NAK or NAK, IBA 9.7.5.1)."""
    seen = {("host", "data"): 0, ("guest", "data"): 0, ("host", "ack"): 0, ("guest", "ack"): 0}
    naks = 0
    for frame in frames(pcap):
        packet = roce_packet(frame)
        if packet is None:
            continue
        side = "guest" if frame[6:12] == GUEST_MAC else "host"
        rest = packet[1]
        opcode = rest[0]
        if opcode in RC_DATA:
            seen[(side, "data")] += 1
        elif opcode == RC_ACKNOWLEDGE and len(rest) >= 12 + 4 + 4:
            if rest[12] >> 5 == 0:  # AETH syndrome 000xxxxx: ACK
                seen[(side, "ack")] += 1
            else:
                naks += 1
    return seen, naks


def data_both_ways(pcap):
    """Data and its ACKs went each way, and no NAK: (ok, what was seen)."""
    seen, naks = rc_traffic(pcap)
    counts = ", ".join(f"{side} {kind} {n}" for (side, kind), n in seen.items())
    return naks == 0 and all(seen.values()), f"{counts}, NAKs {naks}"


def main():
    for pcap in sys.argv[1:]:
        good, bad = icrc_tally(pcap)
        ok, detail = data_both_ways(pcap)
        print(f"{pcap}: {good} good ICRC, {bad} bad; {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
