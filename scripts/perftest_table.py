#!/usr/bin/env python3
"""Runs Debian's unmodified perftest tools between two processes on softrdma
(`softrdma run -- ib_*`) and prints one table: WRITE, READ, SEND and ATOMIC,
bandwidth and latency. Part of the README's main job (scripts/demo.sh).

  perftest_table.py [--softrdma build/tools/softrdma] [--iters N] [--sizes 64,4096,...]

Every figure is what perftest itself printed in this run; nothing is computed here
but the table layout. Exit status 1 if any run failed.
"""
import argparse
import os
import re
import subprocess
import sys
import time

BW_TOOLS = [("ib_write_bw", []), ("ib_read_bw", []), ("ib_send_bw", []),
            ("ib_atomic_bw", ["-A", "FETCH_AND_ADD"]), ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"])]
LAT_TOOLS = [("ib_write_lat", []), ("ib_read_lat", []), ("ib_send_lat", []),
             ("ib_atomic_lat", ["-A", "FETCH_AND_ADD"]), ("ib_atomic_lat", ["-A", "CMP_AND_SWAP"])]
# A result line: bytes, iterations, then numbers.
RESULT = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?", re.M)


def listening(port):
    want = f":{port:04X} "
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                if any(want in line and line.split()[3] == "0A" for line in f):
                    return True
        except OSError:
            pass
    return False


def run_pair(softrdma, tool, args, port, timeout=120):
    """Server and client of one perftest run; returns the client's output or None."""
    cmd = [softrdma, "run", "--", tool, *args, "-p", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while not listening(port) and time.time() < deadline and server.poll() is None:
        time.sleep(0.05)
    try:
        client = subprocess.run(cmd + ["127.0.0.1"], capture_output=True, text=True,
                                timeout=timeout)
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        return None
    if client.returncode != 0 or server.returncode != 0:
        sys.stderr.write(f"{tool} {' '.join(args)}: failed\n{client.stdout}{client.stderr}\n")
        return None
    return client.stdout


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--softrdma", default=os.path.join(here, "..", "build", "tools", "softrdma"))
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--sizes", default="64,4096,65536,1048576")
    opts = parser.parse_args()
    port = 19500 + os.getpid() % 1000
    failed = 0
    print(f"{'test':<30} {'bytes':>8} {'BW avg MB/s':>12} {'Mmsg/s':>8} {'lat typ us':>11} {'lat avg us':>11}")
    for tool, extra in BW_TOOLS + LAT_TOOLS:
        atomic = "atomic" in tool
        for size in ([8] if atomic else [int(s) for s in opts.sizes.split(",")]):
            size_args = [] if atomic else ["-s", str(size)]
            out = run_pair(opts.softrdma, tool, extra + size_args + ["-n", str(opts.iters)], port)
            port += 1
            match = RESULT.search(out or "")
            name = f"{tool} {' '.join(extra)}".strip()
            if not match:
                failed += 1
                print(f"{name:<30} {size:>8} {'FAILED':>12}")
                continue
            g = match.groups()
            if tool.endswith("_bw"):  # bytes iters peak avg msgrate
                print(f"{name:<30} {g[0]:>8} {g[3]:>12} {g[4]:>8}")
            else:  # bytes iters t_min t_max t_typical t_avg
                print(f"{name:<30} {g[0]:>8} {'':>12} {'':>8} {g[4]:>11} {g[5] or '':>11}")
            sys.stdout.flush()
    print(f"perftest on softrdma: {failed} run(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
