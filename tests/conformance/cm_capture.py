#!/usr/bin/env python3
"""Issue 8: a connection made by softrdma's librdmacm, captured (SOFTRDMA_PCAP),
decodes in tshark as InfiniBand CM MADs with the expected attributes (REQ, REP,
RTU, DREQ, DREP), and softrdma's REQ, REP and RTU have the structure of Linux
Soft-RoCE's in tests/data/rdma_cm.pcap field for field: the fields that must be
equal are, and the ones a connection chooses (IDs, QPNs, PSNs, addresses) are
present in both.

  cm_capture.py --softrdma TOOL --port P --reference tests/data/rdma_cm.pcap
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

TSHARK = ["tshark", "-d", "udp.port==4791,infiniband"]
# The same in every REQ a RoCEv2 rdma_cm sends for RDMA_PS_TCP over IPv4.
REQ_EQUAL = [
    "infiniband.mad.baseversion", "infiniband.mad.mgmtclass", "infiniband.mad.classversion",
    "infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.attributeid",
    "infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.bth.destqp",
    "infiniband.cm.req.serviceid.prefix", "infiniband.cm.req.serviceid.protocol",
    "infiniband.cm.req.localqkey", "infiniband.cm.req.transpsvctype",
    "infiniband.cm.req.e2eflowctrl", "infiniband.cm.req.pkey", "infiniband.cm.req.rdcexist",
    "infiniband.cm.req.rnrretrcount", "infiniband.cm.req.retrcount",
    "infiniband.cm.req.maxcmretr", "infiniband.cm.req.srq", "infiniband.cm.req.ext_transport",
    "infiniband.cm.req.prim_locallid", "infiniband.cm.req.prim_remotelid",
    "infiniband.cm.req.prim_tfcclass", "infiniband.cm.req.prim_hoplim",
    "infiniband.cm.req.prim_sl", "infiniband.cm.req.prim_subnetlocal",
    "infiniband.cm.req.alt_locallid", "infiniband.cm.req.alt_remotelid",
    "infiniband.cm.req.ip_cm.majv", "infiniband.cm.req.ip_cm.minv", "infiniband.cm.req.ip_cm.ipv",
]
# Chosen per connection: present (decoded) in both.
REQ_PRESENT = [
    "infiniband.cm.req.serviceid.dport", "infiniband.cm.req.localcaguid",
    "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
    "infiniband.cm.req.responderres", "infiniband.cm.req.initdepth",
    "infiniband.cm.req.remoteresptout", "infiniband.cm.req.localresptout",
    "infiniband.cm.req.pppmtu", "infiniband.cm.req.prim_localgid_ipv4",
    "infiniband.cm.req.prim_remotegid_ipv4", "infiniband.cm.req.prim_localacktout",
    "infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
]
REP_EQUAL = ["infiniband.mad.classversion", "infiniband.mad.attributeid",
             "infiniband.cm.rep.localqkey", "infiniband.cm.rep.failoveracc",
             "infiniband.cm.rep.e2eflowctrl", "infiniband.cm.rep.srq"]
REP_PRESENT = ["infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn",
               "infiniband.cm.rep.startpsn", "infiniband.cm.rep.respres",
               "infiniband.cm.rep.initdepth", "infiniband.cm.rep.rnrretrcount",
               "infiniband.cm.rep.localcaguid"]
RTU_PRESENT = ["infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid"]


def first_with(pcap, attribute, fields):
    """{field: value} of the first CM MAD with this attribute ID."""
    cmd = TSHARK + ["-r", pcap, "-Y", f"infiniband.mad.attributeid == {attribute}",
                    "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lines = [l for l in out.splitlines() if l.strip()]
    if not lines:
        return None
    return dict(zip(fields, lines[0].split("\t")))


def attributes(pcap):
    out = subprocess.run(TSHARK + ["-r", pcap, "-T", "fields", "-e", "infiniband.mad.attributeid"],
                         capture_output=True, text=True, check=True).stdout
    return [int(v, 16) for v in out.split() if v]


def holds_port(port):
    with open("/proc/net/unix") as f:
        return any(f"@softrdma-rdmacm/106/{port}/" in line for line in f)


def capture(softrdma, port, pcap):
    """Captured at the server: it receives the REQ, RTU and DREQ and sends the REP
    and the DREP before it exits (the client may exit before the DREP is back)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    server_env = dict(env, SOFTRDMA_PCAP=pcap)
    server = subprocess.Popen([softrdma, "run", "--", "rping", "-s", "-a", "127.0.0.1", "-p",
                               str(port), "-C", "1"], env=server_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not holds_port(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rping server never listened")
            time.sleep(0.02)  # the pace of a poll with a deadline
        subprocess.run([softrdma, "run", "--", "rping", "-c", "-a", "127.0.0.1", "-p", str(port),
                        "-C", "1"], env=env, check=True, timeout=120, capture_output=True)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def compare(name, ours, theirs, equal, present):
    ok = True
    if ours is None or theirs is None:
        print(f"{name}: missing ({'softrdma' if ours is None else 'Soft-RoCE'})")
        return False
    for f in equal:
        if ours.get(f) != theirs.get(f) or not ours.get(f):
            print(f"{name}: {f}: softrdma {ours.get(f)!r}, Soft-RoCE {theirs.get(f)!r}")
            ok = False
    for f in present:
        if not ours.get(f) or not theirs.get(f):
            print(f"{name}: {f} not decoded: softrdma {ours.get(f)!r}, Soft-RoCE {theirs.get(f)!r}")
            ok = False
    print(f"{name}: {len(equal)} fields equal, {len(present)} present in both: "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--softrdma", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reference", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "rping.pcap")
        capture(args.softrdma, args.port, pcap)
        seen = attributes(pcap)
        wanted = [0x10, 0x13, 0x14, 0x15, 0x16]  # REQ REP RTU DREQ DREP
        ok = all(a in seen for a in wanted)
        print("CM attributes decoded: " + " ".join("0x%04x" % a for a in seen) +
              ("" if ok else "  (expected REQ, REP, RTU, DREQ, DREP)"))
        ok = compare("REQ", first_with(pcap, "0x0010", REQ_EQUAL + REQ_PRESENT),
                     first_with(args.reference, "0x0010", REQ_EQUAL + REQ_PRESENT),
                     REQ_EQUAL, REQ_PRESENT) and ok
        ok = compare("REP", first_with(pcap, "0x0013", REP_EQUAL + REP_PRESENT),
                     first_with(args.reference, "0x0013", REP_EQUAL + REP_PRESENT),
                     REP_EQUAL, REP_PRESENT) and ok
        ok = compare("RTU", first_with(pcap, "0x0014", RTU_PRESENT),
                     first_with(args.reference, "0x0014", RTU_PRESENT), [], RTU_PRESENT) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
