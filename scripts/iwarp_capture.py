#!/usr/bin/env python3
"""iWARP in a capture: each TCP connection decoded as MPA, DDP and RDMAP, and checked.

The RoCE cases of scripts/interop.py recompute every packet's ICRC; iWARP has no
per-packet CRC, so its cases read the byte streams instead. Per connection:
- the MPA start frames (RFC 5044 §7.1): "MPA ID Req Frame" from the side that
  sent the SYN, "MPA ID Rep Frame" back, revision 2 with the enhanced word
  (RFC 6581 §5: IRD/ORD), no M, no R, and the same C both ways;
- every FPDU after them (RFC 5044 §4: ULPDU length, ULPDU, pad to 4, CRC): with
  C=1 the CRC is CRC32C over length + ULPDU + pad, on the wire as the
  little-endian bytes of the standard value (what siw and softrdma send); with
  C=0 the field is zero;
- DDP and RDMAP version 1 (RFC 5041 §5, RFC 5040 §4), untagged messages on their
  queue (SEND 0, READ request 1, Terminate 2) with MSNs counting from 1, and no
  Terminate (RDMAP opcode 7) at all;
- a stream with a gap, or an FPDU cut short where the connection did not break,
  is a failure too.
Data must flow each way. `tshark_check` asks Wireshark's own (heuristic) MPA and
DDP/RDMAP dissectors the same questions, as a second opinion.

    scripts/iwarp_capture.py run.pcap               # the verdict
    scripts/iwarp_capture.py run.pcap --crc on -v   # and one line per FPDU
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import ctypes.util
import dataclasses
import struct
import subprocess
import sys
from pathlib import Path

MPA_REQ, MPA_REP = b"MPA ID Req Frame", b"MPA ID Rep Frame"
# RFC 5040 §4.3 (the RDMAP opcode, the control byte's low nibble).
OPCODES = {0: "WRITE", 1: "READ_REQ", 2: "READ_RESP", 3: "SEND", 4: "SEND_INV",
           5: "SEND_SE", 6: "SEND_SE_INV", 7: "TERMINATE"}
TERMINATE = 7
# RFC 5040 §5: the untagged queue each message goes to; READ responses and
# WRITEs are tagged.
QUEUE = {1: 1, 3: 0, 4: 0, 5: 0, 6: 0, 7: 2}
TCP_FIN, TCP_SYN, TCP_RST = 0x01, 0x02, 0x04


# ---------------------------------------------------------------- CRC32C
def _isal_crc32c():
    """ISA-L's crc32_iscsi (libisal, a build dependency anyway): its raw register,
    so the inversions are ours. None when the library is missing."""
    name = ctypes.util.find_library("isal") or "libisal.so.2"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    fn = lib.crc32_iscsi
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32]
    return lambda data: fn(bytes(data), len(data), 0xFFFFFFFF) ^ 0xFFFFFFFF


def _table_crc32c():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)

    def crc(data):
        c = 0xFFFFFFFF
        for b in data:
            c = table[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF
    return crc


crc32c = _isal_crc32c() or _table_crc32c()
assert crc32c(b"123456789") == 0xE3069283  # the Castagnoli check value (RFC 3720 B.4)


# ---------------------------------------------------------------- TCP streams
@dataclasses.dataclass
class Stream:
    """One direction of a TCP connection: its bytes in sequence order."""
    src: tuple
    dst: tuple
    isn: int | None = None                 # the SYN's sequence number
    segments: dict = dataclasses.field(default_factory=dict)  # seq -> payload
    flags: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    frames: int = 0

    def reassemble(self):
        """(bytes, gap): the payload from the first byte on, and whether a hole
        (bytes the capture never saw) ended it early."""
        base = (self.isn + 1) if self.isn is not None else min(self.segments, default=0)
        data = bytearray()
        by_offset = sorted(((seq - base) % 2**32, p) for seq, p in self.segments.items())
        for offset, payload in by_offset:
            if offset > len(data):
                return bytes(data), True
            data += payload[len(data) - offset:]
        return bytes(data), False


def read_pcap(path):
    """(seconds, Ethernet frame) for each record of a pcap file (tcpdump -w)."""
    data = Path(path).read_bytes() if Path(path).exists() else b""
    if len(data) < 24:
        return
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
              b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None or struct.unpack(endian + "I", data[20:24])[0] != 1:  # DLT_EN10MB
        raise ValueError(f"{path}: not an Ethernet pcap file")
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack(endian + "IIII", data[pos:pos + 16])
        yield sec + frac * 1e-6, data[pos + 16:pos + 16 + caplen]
        pos += 16 + caplen


def tcp_streams(path):
    """Every TCP direction in the capture (IPv4 over Ethernet), keyed by
    (src ip, src port, dst ip, dst port). Retransmissions overwrite alike."""
    streams = {}
    for _, frame in read_pcap(path):
        if frame[12:14] != b"\x08\x00" or len(frame) < 34 or frame[23] != 6:
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        ip = ip[:struct.unpack(">H", ip[2:4])[0]]
        tcp = ip[ihl:]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        flags = tcp[13]
        src = (".".join(map(str, ip[12:16])), sport)
        dst = (".".join(map(str, ip[16:20])), dport)
        s = streams.setdefault(src + dst, Stream(src, dst))
        s.frames += 1
        if flags & TCP_SYN:
            s.isn = seq
            s.flags["SYN"] += 1
        if flags & TCP_FIN:
            s.flags["FIN"] += 1
        if flags & TCP_RST:
            s.flags["RST"] += 1
        payload = tcp[(tcp[12] >> 4) * 4:]
        if payload and len(payload) >= len(s.segments.get(seq, b"")):
            s.segments[seq] = payload
    return streams


# ---------------------------------------------------------------- MPA / DDP / RDMAP
@dataclasses.dataclass
class StartFrame:
    """RFC 5044 §7.1, with RFC 6581's enhanced word when revision 2 says so."""
    key: bytes
    marker: bool
    crc: bool
    reject: bool
    enhanced: bool
    revision: int
    private_data: bytes

    @classmethod
    def parse(cls, data):
        if len(data) < 20 or data[:16] not in (MPA_REQ, MPA_REP):
            return None
        bits, pd_len = struct.unpack(">HH", data[16:20])
        if len(data) < 20 + pd_len:
            return None
        return cls(data[:16], bool(bits & 0x8000), bool(bits & 0x4000), bool(bits & 0x2000),
                   bool(bits & 0x1000), bits & 0xFF, data[20:20 + pd_len])

    @property
    def size(self):
        return 20 + len(self.private_data)

    def describe(self):
        s = (f"{self.key.decode()} M={self.marker:d} C={self.crc:d} R={self.reject:d} "
             f"enhanced={self.enhanced:d} rev={self.revision} pd_len={len(self.private_data)}")
        if self.enhanced and len(self.private_data) >= 4:
            ird, ord_ = struct.unpack(">HH", self.private_data[:4])
            s += (f" IRD={ird & 0x3FFF} ORD={ord_ & 0x3FFF} P2P={ird >> 15} "
                  f"RTR={'W' if ord_ & 0x8000 else ''}{'R' if ord_ & 0x4000 else ''}"
                  f"{'S' if ird & 0x4000 else ''}")
        return s


@dataclasses.dataclass
class Fpdu:
    offset: int           # in the stream
    ulpdu: bytes
    crc_field: bytes
    crc_ok: bool | None   # None when C=0: then crc_ok means "the field is zero"

    @property
    def tagged(self):
        return bool(self.ulpdu[0] & 0x80)

    @property
    def last(self):
        return bool(self.ulpdu[0] & 0x40)

    @property
    def ddp_version(self):
        return self.ulpdu[0] & 0x03

    @property
    def rdmap_version(self):
        return self.ulpdu[1] >> 6

    @property
    def opcode(self):
        return self.ulpdu[1] & 0x0F

    def untagged_fields(self):
        """(queue, MSN, MO) of an untagged DDP header (RFC 5041 §5.2)."""
        return struct.unpack(">III", self.ulpdu[6:18])

    def describe(self):
        s = (f"@{self.offset} ulpdu={len(self.ulpdu)} T={self.tagged:d} L={self.last:d} "
             f"{OPCODES.get(self.opcode, self.opcode)}")
        if self.tagged and len(self.ulpdu) >= 14:
            stag, to = struct.unpack(">IQ", self.ulpdu[2:14])
            s += f" stag=0x{stag:08x} to=0x{to:x} data={len(self.ulpdu) - 14}"
        elif len(self.ulpdu) >= 18:
            qn, msn, mo = self.untagged_fields()
            s += f" qn={qn} msn={msn} mo={mo} data={len(self.ulpdu) - 18}"
            if self.opcode == TERMINATE:
                s += f" term={self.ulpdu[18:22].hex()}"
        return s + f" crc={self.crc_field.hex()}" + ("" if self.crc_ok else " BAD")


def fpdus(data, offset, crc):
    """The FPDUs of a stream from `offset` on (RFC 5044 §4.1, no markers), and the
    number of bytes left over that do not make a whole FPDU."""
    out = []
    while offset + 2 <= len(data):
        length = struct.unpack(">H", data[offset:offset + 2])[0]
        pad = -(2 + length) & 3
        end = offset + 2 + length + pad + 4
        if end > len(data):
            break
        covered = data[offset:end - 4]
        field = data[end - 4:end]
        ok = field == struct.pack("<I", crc32c(covered)) if crc else field == b"\0\0\0\0"
        out.append(Fpdu(offset, data[offset + 2:offset + 2 + length], field, ok))
        offset = end
    return out, len(data) - offset


@dataclasses.dataclass
class Direction:
    """What one side of a connection sent after TCP came up."""
    stream: Stream
    start: StartFrame | None = None
    fpdus: list = dataclasses.field(default_factory=list)
    leftover: int = 0
    gap: bool = False

    @property
    def name(self):
        return f"{self.stream.src[0]}:{self.stream.src[1]}"


@dataclasses.dataclass
class Connection:
    initiator: Direction
    responder: Direction
    problems: list = dataclasses.field(default_factory=list)

    @property
    def name(self):
        i, r = self.initiator.stream, self.responder.stream
        return f"{i.src[0]}:{i.src[1]}->{r.src[0]}:{r.src[1]}"

    @property
    def crc(self):
        return self.initiator.start is not None and self.initiator.start.crc


def connections(path):
    """The capture's TCP connections whose initiator sent an MPA request."""
    streams = tcp_streams(path)
    out = []
    for key, forward in streams.items():
        backward = streams.get(key[2:] + key[:2])
        if backward is None or forward.isn is None or forward.flags["SYN"] == 0:
            continue
        data, _ = forward.reassemble()  # the initiator's bytes start with the request
        if not data.startswith(MPA_REQ):
            continue
        conn = Connection(Direction(forward), Direction(backward))
        for d, want in ((conn.initiator, MPA_REQ), (conn.responder, MPA_REP)):
            d_data, d.gap = d.stream.reassemble()
            d.start = StartFrame.parse(d_data)
            if d.start is not None and d.start.key != want:
                d.start = None
        crc = conn.crc
        for d in (conn.initiator, conn.responder):
            if d.start is not None:
                d_data, _ = d.stream.reassemble()
                d.fpdus, d.leftover = fpdus(d_data, d.start.size, crc)
        judge(conn)
        out.append(conn)
    return out


def judge(conn):
    """Fill conn.problems: start frames, CRCs, versions, queues and MSNs, Terminates."""
    p = conn.problems
    req, rep = conn.initiator.start, conn.responder.start
    if rep is None:
        p.append("no MPA reply")
    for d, f in ((conn.initiator, req), (conn.responder, rep)):
        if f is not None and (f.marker or f.reject or f.revision != 2 or not f.enhanced):
            p.append(f"{d.name}: {f.describe()}")
    if req is not None and rep is not None and req.crc != rep.crc:
        p.append(f"C differs: request {req.crc:d}, reply {rep.crc:d}")
    broken = any(d.stream.flags["RST"] for d in (conn.initiator, conn.responder))
    for d in (conn.initiator, conn.responder):
        if d.gap:
            p.append(f"{d.name}: the capture has a hole in the stream")
        if d.leftover and not broken:
            p.append(f"{d.name}: {d.leftover} bytes after the last whole FPDU")
        bad = [f for f in d.fpdus if not f.crc_ok]
        if bad:
            what = "bad CRC" if conn.crc else "nonzero CRC field with C=0"
            p.append(f"{d.name}: {len(bad)} FPDUs with {what}, first {bad[0].describe()}")
        p.extend(f"{d.name}: {m}" for m in message_problems(d.fpdus))


def message_problems(frames):
    """RFC 5041/5040 rules a capture can check: versions, each untagged opcode on its
    queue, MSNs from 1 counting whole messages per queue, and no Terminate."""
    out = []
    msn = {0: 1, 1: 1, 2: 1}
    for f in frames:
        if len(f.ulpdu) < (14 if f.tagged else 18):
            out.append(f"short DDP header {f.describe()}")
            break
        if f.ddp_version != 1 or f.rdmap_version != 1:
            out.append(f"DDP/RDMAP version {f.ddp_version}/{f.rdmap_version} {f.describe()}")
        if f.opcode == TERMINATE:
            out.append(f"Terminate {f.describe()}")
        if f.tagged:
            continue
        qn, got, _ = f.untagged_fields()
        want_qn = QUEUE.get(f.opcode)
        if want_qn is None or qn != want_qn:
            out.append(f"opcode on queue {qn} {f.describe()}")
            continue
        if got != msn[qn]:
            out.append(f"MSN {got}, expected {msn[qn]} {f.describe()}")
            msn[qn] = got
        if f.last:
            msn[qn] += 1
    return out[:5]


DATA_OPCODES = {0, 2, 3, 4, 5, 6}  # WRITE, READ response, the SENDs


def check(path, crc=None):
    """(ok, tally, detail) for a capture: every MPA connection correct (`crc`: the C
    every connection must have used, None for either), data each way."""
    try:
        conns = connections(path)
    except (OSError, ValueError) as e:
        return False, "no capture", str(e)
    problems = []
    data = collections.Counter()
    for c in conns:
        problems += [f"{c.name}: {m}" for m in c.problems]
        if crc is not None and c.initiator.start is not None and c.crc != crc:
            problems.append(f"{c.name}: C={c.crc:d}, the case wants C={crc:d}")
        for d in (c.initiator, c.responder):
            data[d.stream.src[0]] += sum(1 for f in d.fpdus if f.opcode in DATA_OPCODES)
    if not conns:
        problems.append("no MPA connection")
    elif len(data) < 2 or not all(data.values()):
        problems.append(f"data FPDUs one way only: {dict(data)}")
    total = sum(len(d.fpdus) for c in conns for d in (c.initiator, c.responder))
    crcs = sorted({"on" if c.crc else "off" for c in conns})
    tally = f"{len(conns)} conn {total} fpdu crc {'/'.join(crcs) or '-'}"
    return not problems, tally, "; ".join(problems[:6])


# ---------------------------------------------------------------- tshark
TSHARK_FIELDS = ["ip.src", "iwarp_mpa.key.req", "iwarp_mpa.key.rep", "iwarp_mpa.crc_check",
                 "iwarp_rdma.opcode"]


def tshark(path, *args):
    # RPC-over-RDMA's heuristic claims SEND payloads (rstream's bytes) as its own
    # and leaves tshark decoding the rest as bogus RDMAP headers, Terminates among
    # them; softrdma's iWARP carries no RPC.
    cmd = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", str(path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout


def tshark_check(path):
    """(ok, detail): Wireshark decodes the capture as iWARP on its own (its MPA
    dissector is heuristic: it finds the start frames, no `-d` needed), sees a
    request and a reply, RDMAP messages from both addresses, no Terminate, and no
    FPDU whose CRC it finds bad."""
    fields = ["-T", "fields", "-E", "occurrence=a"]
    for f in TSHARK_FIELDS:
        fields += ["-e", f]
    try:
        out = tshark(path, "-Y", "iwarp_mpa", *fields)
        checked = 0
        for line in out.splitlines():
            checked += len([c for c in (line.split("\t") + [""] * 5)[3].split(",") if c])
        # tshark 4.0 puts a recomputed CRC in iwarp_mpa.crc_check either way and says
        # which only in the text: "(Good CRC32)" or "(Bad CRC32), should be ...".
        verdicts = tshark(path, "-Y", "iwarp_mpa.crc_check", "-O", "iwarp_mpa") if checked else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"tshark: {e}"
    requests = replies = terminates = 0
    messages = collections.Counter()
    for line in out.splitlines():
        src, req, rep, _, opcodes = (line.split("\t") + [""] * 5)[:5]
        requests += bool(req)
        replies += bool(rep)
        for op in filter(None, opcodes.split(",")):
            messages[src] += 1
            terminates += int(op, 0) == TERMINATE
    good_crc, bad_crc = verdicts.count("(Good CRC32)"), verdicts.count("(Bad CRC32")
    problems = []
    if not requests or not replies:
        problems.append(f"tshark found {requests} MPA requests, {replies} replies")
    if len(messages) < 2:
        problems.append(f"tshark decoded RDMAP from {dict(messages) or 'nobody'}")
    if terminates:
        problems.append(f"tshark: {terminates} Terminates")
    if bad_crc or good_crc != checked:
        problems.append(f"tshark: of {checked} CRCs {good_crc} good, {bad_crc} bad")
    detail = (f"tshark: {requests} req {replies} rep {sum(messages.values())} rdmap, "
              f"crc {good_crc} good {bad_crc} bad")
    return not problems, "; ".join(problems) or detail


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pcap")
    parser.add_argument("--crc", choices=["on", "off"], help="the C every connection must use")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per FPDU")
    parser.add_argument("--limit", type=int, default=0, help="with -v: at most this many per side")
    parser.add_argument("--no-tshark", action="store_true")
    args = parser.parse_args()
    if args.verbose:
        for c in connections(args.pcap):
            print(f"== {c.name}")
            for d in (c.initiator, c.responder):
                print(f"  {d.name}: {d.start.describe() if d.start else 'no start frame'}; "
                      f"{len(d.fpdus)} FPDUs, {d.leftover} bytes left, gap={d.gap:d}, "
                      f"flags {dict(d.stream.flags)}")
                for f in d.fpdus[:args.limit or None]:
                    print(f"    {f.describe()}")
    ok, tally, detail = check(args.pcap, None if args.crc is None else args.crc == "on")
    print(f"{'OK' if ok else 'BAD'}  {tally}" + (f"  {detail}" if detail else ""))
    if not args.no_tshark:
        t_ok, t_detail = tshark_check(args.pcap)
        print(f"{'OK' if t_ok else 'BAD'}  {t_detail}")
        ok = ok and t_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
