#!/usr/bin/python3
"""softrdma beside its peers and floors, in one run on one machine (issue 6).

Runs, interleaved and repeated (median, min-max of the rounds):
  softrdma   Debian's perftest through `softrdma run` (latency, bandwidth, 8 B rate)
  UCX tcp    ucx_perftest with UCX_TLS=tcp
  UCX ud     ucx_perftest with UCX_TLS=ud_verbs on softrdma0, through `softrdma run`
             (docs/decisions/ucx.md)
  UCX rc     the same with UCX_TLS=rc_verbs,ud_verbs (rc_verbs needs ud_verbs for
             its wireup in UCX 1.13)
  libfabric  fi_pingpong with the tcp provider (FI_EP_MSG, and FI_EP_RDM)
  floors     bench/udp_floor: UDP ping-pong, UDP streams (sendto, sendmmsg, GSO+GRO)
1500-byte link (issue 29): bench/link_1500.sh, ib_write_bw over RoCEv2 and iWARP
between two namespaces on a veth of MTU 1500 beside UDP_SEGMENT sends of the same
datagrams on that link (needs root).
iWARP (issue 16): softrdma with SOFTRDMA_WIRE=iwarp (perftest -R: connected by
rdma_cm over TCP) beside bench/tcp_floor, a TCP ping-pong and a TCP stream on one
connection with TCP_NODELAY, the ground iWARP's FPDUs stand on.
Same host (issue 15): softrdma over both paths (the same-host path a user gets,
and SOFTRDMA_TRANSPORT=udp), UCX with UCX_TLS=sm, libfabric's shm provider, and
bench/shm_floor (a cache line ping-ponged between processes, a 1 MiB memcpy, one
process_vm_writev). The load average is read before each case; the report marks
figures taken on a busy machine (a ratio to a floor measured under load means
little).
and prints each softrdma figure as a ratio to its peers and floor, with CPU seconds
(both processes, user + system) per GB moved. Writes the Markdown table into
docs/performance.md (between the compare markers) and PNG plots into docs/.

Usage: bench/compare.sh [--rounds N] [--quick] [--build DIR] [--no-write]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = [21000]


# Issue 27: the server and the client share one address over UDP; "steered": each
# packet reaches its QP's process by the reuseport group's program; "handed over":
# each lands at the other process, which hands it over (SOFTRDMA_SHARE_ADDRESS=
# crossed). Beside the "udp" rows, where each process has an address of its own.
SHARED_ADDRESS = "127.0.0.91"
SHARED_PATHS = {"steered": "1", "handed over": "crossed"}
# Issue 29: the 1500-byte link between two namespaces (bench/link_1500.sh).
LINK_FLOOR = "floor UDP 1040 B GSO sends, 1500-byte link"
LINK_ROCE = "softrdma ib_write_bw 64 KiB, 1500-byte link"
LINK_IWARP = "softrdma iWARP ib_write_bw 64 KiB, 1500-byte link"


def next_port():
    PORT[0] += 7
    return PORT[0]


def cpu_busy_jiffies():
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def machine_state_before(window=0.5):
    """The 1-minute load average, and the share of the machine's CPUs busy during
    `window` seconds with no case running: the work of others. The load average
    alone cannot tell: in an interleaved run it mostly counts the cases before."""
    load = os.getloadavg()[0]
    busy0, total0 = cpu_busy_jiffies()
    time.sleep(window)
    busy1, total1 = cpu_busy_jiffies()
    other = 100.0 * (busy1 - busy0) / max(1, total1 - total0)
    return load, other


def timed_pair(server, client, env=None, timeout=120):
    """Starts `server`, then `client`; returns both outputs and the CPU time (user +
    system) of both processes (wait4). Outputs go to files: a pipe that fills up
    would stop a chatty tool."""
    env = dict(os.environ, **(env or {}))
    files = [tempfile.TemporaryFile() for _ in range(2)]
    srv = subprocess.Popen(server, stdout=files[1], stderr=subprocess.STDOUT, env=env)
    time.sleep(0.4)
    cli = subprocess.Popen(client, stdout=files[0], stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + timeout
    cpu = 0.0
    for proc in (cli, srv):
        while True:
            pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                cpu += usage.ru_utime + usage.ru_stime
                break
            if time.time() > deadline:
                proc.kill()
                deadline = time.time() + 5
            time.sleep(0.005)
        proc.returncode = 0
    outputs = []
    for f in files:
        f.seek(0)
        outputs.append(f.read().decode(errors="replace"))
        f.close()
    return outputs[0], outputs[1], cpu


class Bench:
    def __init__(self, build, quick):
        self.build = build
        self.softrdma = os.path.join(build, "tools", "softrdma")
        self.floor = os.path.join(build, "bench", "udp_floor")
        self.shm_floor = os.path.join(build, "bench", "shm_floor")
        self.tcp_floor = os.path.join(build, "bench", "tcp_floor")
        self.quick = quick
        # name -> list of (value, cpu_per_gb or None, (load average, other work) before)
        self.samples = {}
        self.load = (0.0, 0.0)  # before the case running now (machine_state_before)

    def add(self, name, value, cpu_per_gb=None):
        self.samples.setdefault(name, []).append((value, cpu_per_gb, self.load))

    # --- softrdma: perftest ---
    def perftest(self, tool, size, extra=(), iters=None, path="udp"):
        port = next_port()
        base = [self.softrdma, "run", "--", tool, "-p", str(port), "-s", str(size)] + list(extra)
        if iters:
            base += ["-n", str(iters)]
        # An address of its own each (SOFTRDMA_SHARE_ADDRESS=0: a 127.x.y.z per
        # process, MTU 4096 on loopback), as every row was measured before the
        # defaults shared the host's address (issue 27); the shared rows below.
        env = {"SOFTRDMA_TRANSPORT": "udp" if path == "udp" else "auto",
               "SOFTRDMA_SHARE_ADDRESS": "0"}
        server_address = "127.0.0.1"
        if path == "iwarp":  # connected by rdma_cm: perftest's -R
            env = {"SOFTRDMA_WIRE": "iwarp", "SOFTRDMA_SHARE_ADDRESS": "0"}
            base.append("-R")
        if path in SHARED_PATHS:  # both processes on one address (issue 27)
            server_address = SHARED_ADDRESS
            env = {"SOFTRDMA_TRANSPORT": "udp", "SOFTRDMA_ADDR": SHARED_ADDRESS,
                   "SOFTRDMA_SHARE_ADDRESS": SHARED_PATHS[path]}
        for attempt in range(3):
            out, srv, cpu = timed_pair(base, base + [server_address], env)
            rows = [l.split() for l in out.splitlines()
                    if re.match(r"^\s*%d\s+\d+\s" % size, l)]
            if rows:
                return rows[-1], cpu
            # perftest's own CPU-clock calibration can give up on a loaded machine;
            # perftest 4.5's -R connects before its server listens again (over
            # iWARP a refused TCP connect: REJECTED -111; tests/conformance/
            # run_client.py TOOL_FAILURES).
            if "Correlation coefficient" not in out + srv and \
                    "RDMA_CM_EVENT_REJECTED; error: -111" not in out + srv:
                break
        raise RuntimeError("%s -s %d failed:\n%s" % (tool, size, out[-2000:]))

    def softrdma_latency(self, tool, label, path="udp"):
        row, _ = self.perftest(tool, 8, iters=3000 if self.quick else 20000, path=path)
        self.add(label, float(row[4]))  # t_typical, usec

    def softrdma_bandwidth(self, tool, size, qps, label, path="udp"):
        # About 512 MiB a run (the CPU figure includes starting the processes).
        iters = max(200, min(100000, (512 << 20) // size // qps)) if not self.quick else 500
        row, cpu = self.perftest(tool, size, ["-q", str(qps)], iters, path)
        gbps = float(row[3]) * 8 / 1000  # BW average, MB/s
        moved = size * iters * qps / 1e9
        self.add(label, gbps, cpu / moved if moved else None)

    def softrdma_rate(self, label, path="udp"):
        # perftest: iterations a multiple of the post list.
        row, _ = self.perftest("ib_write_bw", 8, ["--post_list=32"],
                               2048 if self.quick else 200000, path)
        self.add(label, float(row[4]))  # MsgRate, Mpps

    # --- UCX over TCP, and over softrdma (ud_verbs) ---
    def ucx(self, test, size, iters, tls="tcp"):
        port = next_port()
        env = {"UCX_TLS": "rc_verbs,ud_verbs" if tls == "rc_verbs" else tls}
        server = ["ucx_perftest", "-p", str(port)]
        if tls not in ("tcp", "sm"):
            # On softrdma0, each process in `softrdma run`'s sysfs view; UCX 1.13's
            # ud_verbs needs its GRH check off (docs/decisions/ucx.md).
            env.update(UCX_NET_DEVICES="softrdma0:1")
            server = [self.softrdma, "run", "--"] + server
        client = server + ["127.0.0.1", "-t", test, "-s", str(size), "-n", str(iters)]
        out, _, cpu = timed_pair(server, client, env)
        final = [l.split() for l in out.splitlines() if l.startswith("Final:")]
        if not final:
            raise RuntimeError("ucx_perftest %s failed:\n%s" % (test, out[-2000:]))
        return final[-1], cpu

    def ucx_latency(self, test, label, tls="tcp"):
        row, _ = self.ucx(test, 8, 2000 if self.quick else 20000, tls)
        self.add(label, float(row[2]))  # 50th percentile, usec (one way)

    def ucx_bandwidth(self, test, size, label, tls="tcp"):
        iters = 500 if self.quick else max(200, min(100000, (512 << 20) // size))
        if tls not in ("tcp", "sm"):
            iters = min(iters, 2000)  # about 2 GiB at 1 MiB: UD moves ~0.3-0.5 GB/s here
        row, cpu = self.ucx(test, size, iters, tls)
        gbps = float(row[6]) * 8 * 1.048576 / 1000  # overall MB/s (MiB) -> Gb/s
        moved = size * iters / 1e9
        self.add(label, gbps, cpu / moved)

    def ucx_rate(self, label, tls="tcp"):
        row, _ = self.ucx("ucp_put_bw", 8, 20000 if self.quick else 500000, tls)
        self.add(label, float(row[8]) / 1e6)  # overall msg/s -> M/s

    # --- libfabric tcp ---
    def fabric(self, ep, size, iters, label, measure, provider="tcp"):
        port = next_port()
        common = ["fi_pingpong", "-p", provider, "-e", ep, "-I", str(iters), "-S", str(size)]
        out, _, _ = timed_pair(common + ["-B", str(port)], common + ["-P", str(port), "127.0.0.1"])
        # "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec"; bytes as 8, 4k, 1m.
        rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+[kmg]?\s+\S+\s+=", l)]
        if not rows:
            raise RuntimeError("fi_pingpong %s failed:\n%s" % (ep, out[-2000:]))
        row = rows[-1]
        value = float(row[6]) if measure == "usec" else float(row[5]) * 8 / 1000
        self.add(label, value)

    # --- rsockets (rstream) over softrdma, and the same program over TCP sockets ---
    def rstream(self, size, xfers, iters, label, measure, sockets=False):
        """rstream's custom test: `iters` rounds of `xfers` transfers of `size`
        bytes each way; -T s runs the same program over TCP sockets."""
        port = next_port()
        mode = ["-T", "s"] if sockets else ["-T", "b"]
        server = ["rstream", "-p", str(port), "-S", str(size), "-C", str(xfers),
                  "-I", str(iters)] + mode
        if not sockets:
            server = [self.softrdma, "run", "--"] + server
        out, _, _ = timed_pair(server, server + ["-s", "127.0.0.1"])
        # "name bytes xfers iters total time Gb/sec usec/xfer"
        rows = [l.split() for l in out.splitlines() if l.startswith("custom")]
        if not rows:
            raise RuntimeError("rstream %s failed:\n%s" % (label, out[-2000:]))
        self.add(label, float(rows[-1][7] if measure == "usec" else rows[-1][6]))

    # --- floors ---
    def udp_pingpong(self):
        port = next_port()
        out, _, _ = timed_pair([self.floor, "pingpong", "server", "127.0.0.1", str(port)],
                               [self.floor, "pingpong", "client", "127.0.0.1", str(port),
                                "5000" if self.quick else "50000", "8"])
        rtt = float(re.search(r"rtt_us_median ([\d.]+)", out).group(1))
        self.add("floor UDP one-way (RTT/2)", rtt / 2)
        self.add("floor UDP RTT", rtt)

    def udp_stream(self, mode):
        port = next_port()
        _, srv, _ = timed_pair([self.floor, "stream", "server", "127.0.0.1", str(port), mode],
                               [self.floor, "stream", "client", "127.0.0.1", str(port), mode,
                                "0.5" if self.quick else "1.5"])
        self.add("floor UDP 4 KiB %s" % mode, float(re.search(r"gbps ([\d.]+)", srv).group(1)))

    def tcp_pingpong(self):
        port = next_port()
        out, _, _ = timed_pair([self.tcp_floor, "pingpong", "server", "127.0.0.1", str(port)],
                               [self.tcp_floor, "pingpong", "client", "127.0.0.1", str(port),
                                "5000" if self.quick else "50000", "8"])
        rtt = float(re.search(r"rtt_us_median ([\d.]+)", out).group(1))
        self.add("floor TCP 8 B one-way (RTT/2)", rtt / 2)

    def tcp_stream(self, size):
        port = next_port()
        _, srv, _ = timed_pair([self.tcp_floor, "stream", "server", "127.0.0.1", str(port)],
                               [self.tcp_floor, "stream", "client", "127.0.0.1", str(port),
                                "0.5" if self.quick else "1.5", str(size)])
        self.add("floor TCP stream %s writes" % human(size),
                 float(re.search(r"gbps ([\d.]+)", srv).group(1)))

    def link_1500(self):
        """Issue 29: RoCEv2 (and iWARP) across a 1500-byte link between two namespaces,
        beside that link's floor, by bench/link_1500.sh (one round of it per round here;
        it needs root for its namespaces). MB/s there, Gb/s here."""
        out = subprocess.run(
            ["bash", os.path.join(ROOT, "bench", "link_1500.sh"), self.build,
             "3" if self.quick else "8", "1"],
            env=dict(os.environ, LINK_WIRES="roce iwarp"), capture_output=True, text=True,
            check=True, timeout=300).stdout
        found = dict(re.findall(r"^# (\w+): ([\d.]+) MB/s$", out, re.M))
        for key, name in (("floor", LINK_FLOOR), ("roce", LINK_ROCE), ("iwarp", LINK_IWARP)):
            if key not in found:
                raise RuntimeError("link_1500.sh gave no %s figure:\n%s" % (key, out))
            self.add(name, float(found[key]) * 8 / 1000)

    def shm_floors(self):
        out = subprocess.run([self.shm_floor, "pingpong", "20000" if self.quick else "200000"],
                             capture_output=True, text=True, check=True).stdout
        self.add("floor shm ping-pong one-way",
                 float(re.search(r"one_way_us ([\d.]+)", out).group(1)))
        out = subprocess.run([self.shm_floor, "memcpy", "500" if self.quick else "4000"],
                             capture_output=True, text=True, check=True).stdout
        self.add("floor memcpy 1 MiB", float(re.search(r"gbps ([\d.]+)", out).group(1)))
        for size, calls in ((8, 200000), (1 << 20, 2000)):
            out = subprocess.run([self.shm_floor, "cma", str(size), str(calls // (10 if self.quick else 1))],
                                 capture_output=True, text=True, check=True).stdout
            if size == 8:
                self.add("floor CMA call 8 B latency",
                         float(re.search(r"cma_8_us ([\d.]+)", out).group(1)))
            else:
                self.add("floor CMA 1 MiB", float(re.search(r"_gbps ([\d.]+)", out).group(1)))

    def idle_cpu(self):
        """% of a core a softrdma context with a QP uses while nothing happens."""
        port = next_port()
        proc = subprocess.Popen([self.softrdma, "run", "--", "ibv_rc_pingpong", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        def ticks():
            total = 0
            for tid in os.listdir("/proc/%d/task" % proc.pid):
                with open("/proc/%d/task/%s/stat" % (proc.pid, tid)) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            return total
        t0, c0 = time.time(), ticks()
        time.sleep(1.0 if self.quick else 3.0)
        t1, c1 = time.time(), ticks()
        proc.kill()
        proc.wait()
        self.add("softrdma idle context, % of a core",
                 100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0))


def cases(b):
    sizes = [4096, 65536, 1048576] if not b.quick else [4096, 1048576]
    qps = [1, 8] if not b.quick else [1]
    out = []
    for tool in ("ib_write_lat", "ib_send_lat", "ib_read_lat", "ib_atomic_lat"):
        for path, who in (("udp", "softrdma"), ("host", "softrdma same-host")):
            label = "%s %s 8 B" % (who, tool)
            out.append((label, lambda tool=tool, label=label, path=path:
                        b.softrdma_latency(tool, label, path)))
    for path, who in (("udp", "softrdma"), ("host", "softrdma same-host")):
        label = "%s 8 B WRITE rate (post list 32), M/s" % who
        out.append((label, lambda label=label, path=path: b.softrdma_rate(label, path)))
    for path in SHARED_PATHS:
        for tool in ("ib_send_lat", "ib_write_lat"):
            label = "softrdma shared address, %s, %s 8 B" % (path, tool)
            out.append((label, lambda tool=tool, label=label, path=path:
                        b.softrdma_latency(tool, label, path)))
        for size in (65536, 1048576):
            label = "softrdma shared address, %s, ib_write_bw %s 1 QP" % (path, human(size))
            out.append((label, lambda size=size, label=label, path=path:
                        b.softrdma_bandwidth("ib_write_bw", size, 1, label, path)))
    for test in ("tag_lat", "ucp_put_lat"):
        label = "UCX sm %s 8 B" % test
        out.append((label, lambda test=test, label=label: b.ucx_latency(test, label, "sm")))
    label = "UCX sm ucp_put_bw 8 B rate, M/s"
    out.append((label, lambda label=label: b.ucx_rate(label, "sm")))
    label = "libfabric shm fi_pingpong rdm 8 B"
    out.append((label, lambda label=label:
                b.fabric("rdm", 8, 2000 if b.quick else 20000, label, "usec", "shm")))
    out.append(("floors shm", b.shm_floors))
    for test, tls in (("ucp_put_lat", "tcp"), ("tag_lat", "tcp"), ("tag_lat", "ud_verbs"),
                      ("tag_lat", "rc_verbs"), ("ucp_put_lat", "rc_verbs")):
        label = "UCX %s %s 8 B" % (tls if tls == "tcp" else tls + " on softrdma", test)
        out.append((label, lambda test=test, label=label, tls=tls: b.ucx_latency(test, label, tls)))
    label = "UCX tcp ucp_put_bw 8 B rate, M/s"
    out.append((label, lambda label=label: b.ucx_rate(label)))
    for ep in ("msg", "rdm"):
        label = "libfabric tcp fi_pingpong %s 8 B" % ep
        out.append((label, lambda ep=ep, label=label:
                    b.fabric(ep, 8, 2000 if b.quick else 20000, label, "usec")))
    out.append(("floor UDP RTT", b.udp_pingpong))
    # iWARP (issue 16) beside its TCP floors.
    for tool in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
        label = "softrdma iWARP %s 8 B" % tool
        out.append((label, lambda tool=tool, label=label: b.softrdma_latency(tool, label, "iwarp")))
    out.append(("floor TCP 8 B one-way (RTT/2)", b.tcp_pingpong))
    out.append(("softrdma idle context", b.idle_cpu))
    out.append(("1500-byte link", b.link_1500))
    for mode in ("sendto", "sendmmsg", "gso"):
        out.append(("floor UDP 4 KiB %s" % mode, lambda mode=mode: b.udp_stream(mode)))
    for size in sizes:
        for tool in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            for q in qps:
                label = "softrdma %s %s %d QP" % (tool, human(size), q)
                out.append((label, lambda tool=tool, size=size, q=q, label=label:
                            b.softrdma_bandwidth(tool, size, q, label)))
            label = "softrdma same-host %s %s 1 QP" % (tool, human(size))
            out.append((label, lambda tool=tool, size=size, label=label:
                        b.softrdma_bandwidth(tool, size, 1, label, "host")))
        for test in ("tag_bw", "ucp_put_bw", "ucp_get"):
            label = "UCX sm %s %s" % (test, human(size))
            out.append((label, lambda test=test, size=size, label=label:
                        b.ucx_bandwidth(test, size, label, "sm")))
        label = "libfabric shm fi_pingpong rdm %s" % human(size)
        out.append((label, lambda size=size, label=label:
                    b.fabric("rdm", size, 200 if b.quick else 2000, label, "gbps", "shm")))
        for test in ("ucp_put_bw", "ucp_get", "tag_bw"):
            label = "UCX tcp %s %s" % (test, human(size))
            out.append((label, lambda test=test, size=size, label=label:
                        b.ucx_bandwidth(test, size, label)))
        for tls in ("ud_verbs", "rc_verbs"):
            for test in ("tag_bw", "ucp_put_bw", "ucp_get"):
                label = "UCX %s on softrdma %s %s" % (tls, test, human(size))
                out.append((label, lambda test=test, size=size, label=label, tls=tls:
                            b.ucx_bandwidth(test, size, label, tls)))
        for tool in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            label = "softrdma iWARP %s %s 1 QP" % (tool, human(size))
            out.append((label, lambda tool=tool, size=size, label=label:
                        b.softrdma_bandwidth(tool, size, 1, label, "iwarp")))
        label = "floor TCP stream %s writes" % human(size)
        out.append((label, lambda size=size: b.tcp_stream(size)))
        label = "libfabric tcp fi_pingpong msg %s" % human(size)
        out.append((label, lambda size=size, label=label:
                    b.fabric("msg", size, 200 if b.quick else 2000, label, "gbps")))
    # rsockets against the same program over TCP: ping-pong latency, then a
    # stream of 1 MiB transfers.
    for sockets, who in ((False, "rsockets on softrdma"), (True, "TCP sockets")):
        label = "rstream %s 64 B latency" % who
        out.append((label, lambda sockets=sockets, label=label:
                    b.rstream(64, 1, 2000 if b.quick else 20000, label, "usec", sockets)))
        label = "rstream %s 1 MiB" % who
        out.append((label, lambda sockets=sockets, label=label:
                    b.rstream(1 << 20, 100 if b.quick else 1000, 1, label, "gbps", sockets)))
    return out


def human(size):
    return "%d KiB" % (size // 1024) if size < 1 << 20 else "%d MiB" % (size >> 20)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import compare_report

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, fewer sizes")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--only", metavar="REGEX",
                        help="only the cases whose name matches (implies --no-write)")
    args = parser.parse_args()
    bench = Bench(args.build, args.quick)
    rounds = 1 if args.quick else args.rounds
    all_cases = [fn for name, fn in cases(bench)
                 if args.only is None or re.search(args.only, name)]
    failures = []
    for r in range(rounds):
        for i, case in enumerate(all_cases):
            print("round %d/%d case %d/%d" % (r + 1, rounds, i + 1, len(all_cases)),
                  file=sys.stderr, flush=True)
            bench.load = machine_state_before()
            try:
                case()
            except Exception as e:  # a peer tool failing is reported, not fatal
                failures.append(str(e).splitlines()[0])
    report = compare_report.Report(bench.samples, rounds, failures)
    print(report.markdown())
    if not args.no_write and args.only is None:
        report.write(os.path.join(ROOT, "docs"))
    sys.exit(1 if failures else 0)
