#!/usr/bin/python3
"""rping between two softrdma processes over iWARP (SOFTRDMA_WIRE=iwarp, MPA CRC
asked for), captured on loopback with tcpdump and decoded by tshark's MPA, DDP and
RDMAP dissectors (issue 16): the MPA request and reply (revision 2, C set), then
FPDUs of every RDMAP operation rping uses (the RTR WRITE, SEND, READ request and
response, WRITE) with every CRC good, no Terminate, nothing malformed.

  iwarp_capture.py --softrdma PATH --port N
Exit 0 when every check passed; otherwise says which failed.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def capture(pcap, port):
    """tcpdump on loopback, packets written as they come (-U); returns once it
    captures."""
    log = pcap + ".log"
    # -Z root: Debian's tcpdump drops to its own user, which may not write `pcap`.
    # --immediate-mode: packets reach the file as they come, not in blocks a
    # second apart (the last block would be lost at the end).
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-s", "0", "-Z", "root", "-w", pcap,
                             "tcp port %d" % port],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    # It captures some time after saying it listens: knock on the port (refused,
    # nobody listens yet) until the knock is in the file.
    for _ in range(1500):
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            pass
        if os.path.getsize(pcap) > 24 if os.path.exists(pcap) else False:
            return proc
        time.sleep(0.02)  # the pace of a poll with a deadline
    proc.kill()
    with open(log) as f:
        sys.exit("tcpdump did not start: %s" % f.read().strip())


def listens_on(port):
    """A TCP socket listens on `port` (iWARP's rdma_cm listens on TCP; proc(5))."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def run_rping(softrdma, port):
    env = dict(os.environ, SOFTRDMA_WIRE="iwarp", SOFTRDMA_MPA_CRC="1")
    common = ["-a", "127.0.0.1", "-p", str(port), "-C", "5", "-S", "3000", "-V"]
    server = subprocess.Popen([softrdma, "run", "--", "rping", "-s"] + common, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not listens_on(port):
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit("rping server never listened")
        time.sleep(0.02)  # the pace of a poll with a deadline
    client = subprocess.run([softrdma, "run", "--", "rping", "-c", "-v"] + common, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=120)
    server_out = server.communicate(timeout=60)[0]
    if client.returncode != 0 or server.returncode != 0 or "rdma-ping-4" not in client.stdout:
        sys.exit("rping failed:\n%s\n%s" % (client.stdout[-1500:], server_out[-1500:]))


def decode(pcap):
    # RPC-over-RDMA's heuristic would claim SEND payloads as malformed calls.
    base = ["tshark", "-n", "--disable-protocol", "rpcordma", "-r", pcap]
    fields = subprocess.run(base + ["-T", "fields", "-E", "separator=,", "-e", "iwarp_mpa.key.req",
                                    "-e", "iwarp_mpa.key.rep", "-e", "iwarp_mpa.crc_flag",
                                    "-e", "iwarp_mpa.rev", "-e", "iwarp_rdma.opcode"],
                            capture_output=True, text=True, check=True).stdout
    verbose = subprocess.run(base + ["-V"], capture_output=True, text=True, check=True).stdout
    return fields, verbose


def check(fields, verbose):
    failures = []
    starts = [l for l in fields.splitlines() if l.split(",")[0] or l.split(",")[1]]
    if len(starts) != 2:
        failures.append("expected one MPA request and one reply, found %d start frames" % len(starts))
    for line in starts:
        cells = line.split(",")
        if cells[2] not in ("1", "True") or cells[3] != "2":
            failures.append("start frame without CRC flag or revision 2: %s" % line)
    opcodes = set()
    for line in fields.splitlines():
        for op in line.split(",")[4].split(";") if len(line.split(",")) > 4 else []:
            if op:
                opcodes.add(int(op, 16))
    for op, name in ((0, "WRITE"), (1, "READ request"), (2, "READ response"), (3, "SEND")):
        if op not in opcodes:
            failures.append("no %s FPDU decoded (opcodes seen: %s)" % (name, sorted(opcodes)))
    if 7 in opcodes:
        failures.append("a Terminate was sent")
    good = len(re.findall(r"Good CRC32", verbose))
    if good < 10:
        failures.append("only %d FPDUs with a good CRC" % good)
    for bad in ("Bad CRC32", "Malformed"):
        if bad in verbose:
            failures.append("tshark says: %s" % bad)
    return failures, good, sorted(opcodes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--softrdma", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    for tool in ("tcpdump", "tshark"):
        if shutil.which(tool) is None:
            sys.exit("%s is not installed (scripts/install-deps.sh installs it)" % tool)
    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "iwarp.pcap")
        dump = capture(pcap, args.port)
        try:
            run_rping(args.softrdma, args.port)
            time.sleep(0.3)  # not an event we can see: tcpdump reads what the kernel still holds
        finally:
            dump.terminate()
            dump.wait(timeout=10)
        fields, verbose = decode(pcap)
        failures, good, opcodes = check(fields, verbose)
        if failures:
            kept = "/tmp/softrdma-iwarp-capture-%d.pcap" % args.port
            shutil.copy(pcap, kept)
            sys.exit("\n".join(failures) + "\n(capture kept: %s)" % kept)
    print("iWARP capture: MPA request and reply with CRC, opcodes %s, %d good CRCs" % (opcodes, good))


if __name__ == "__main__":
    main()
