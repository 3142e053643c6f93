#!/usr/bin/env python3
"""Same-host traffic beside CPU hogs (issue 15): a long `ib_write_bw` and `rping -C
1000` between two softrdma processes of this host while N busy loops (default 2,
one per core here) compete for the CPUs. Passes when both complete, say nothing of
a retry or RNR error, and `softrdma status` showed their QPs on the host path.
Not a timed assertion: how long each took is printed, not judged.

    bench/under_load.py                      # 60 s ib_write_bw, rping -C 1000, 2 hogs
    bench/under_load.py --seconds 10 --pings 100 --hogs 1
    bench/under_load.py --transport udp      # the same over the wire, to compare
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAILURE = re.compile(r"RETRY_EXC|RNR_RETRY|retry exceeded|Completion with error|"
                     r"status [1-9]|Bad wc status|error", re.I)


def start_hogs(count):
    """Busy loops of their own (no stress tool needed), one process each."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def paths_of(softrdma, pids):
    """The path (host or udp) of each connected RC QP `softrdma status` lists for
    `pids` (rdma_cm's QP1, UD, always takes the wire)."""
    out = subprocess.run([softrdma, "status"], capture_output=True, text=True).stdout
    paths, ours = [], False
    for line in out.splitlines():
        process = re.match(r"process (\d+) ", line)
        if process:
            ours = int(process.group(1)) in pids
        qp = re.search(r"qp \d+  type RC  state RT[RS] .* path (host|udp)", line)
        if qp and ours:
            paths.append(qp.group(1))
    return paths


def run_pair(softrdma, server, client, env, timeout):
    """Runs server then client under `softrdma run` (which execs: same pids);
    returns (rc_server, rc_client, output, the paths `softrdma status` showed for
    their QPs while they ran, seconds)."""
    logs = [tempfile.TemporaryFile() for _ in range(2)]
    start = time.monotonic()
    srv = subprocess.Popen([softrdma, "run", "--"] + server, stdout=logs[0],
                           stderr=subprocess.STDOUT, env=env)
    time.sleep(1.0)  # the server listens (a fixed pause: a late client only retries)
    cli = subprocess.Popen([softrdma, "run", "--"] + client, stdout=logs[1],
                           stderr=subprocess.STDOUT, env=env)
    paths = []
    while not paths and cli.poll() is None:
        paths = paths_of(softrdma, {srv.pid, cli.pid})
        time.sleep(0.1)
    codes = []
    for proc in (cli, srv):
        try:
            codes.append(proc.wait(timeout=max(1, timeout - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append("timeout")
    seconds = time.monotonic() - start
    text = ""
    for name, f in zip(("server", "client"), logs):
        f.seek(0)
        text += f"----- {name}\n" + f.read().decode(errors="replace")
    return codes[1], codes[0], text, paths, seconds


def judge(name, result, want_path, expect):
    rc_srv, rc_cli, text, paths, seconds = result
    why = []
    if rc_srv != 0 or rc_cli != 0:
        why.append(f"exit server {rc_srv} client {rc_cli}")
    bad = [l for l in text.splitlines() if FAILURE.search(l)]
    if bad:
        why.append("error lines: " + " | ".join(bad[:3]))
    if not re.search(expect, text, re.M):
        why.append(f"no /{expect}/ in the output")
    if not paths:
        why.append("softrdma status showed no QP while they ran")
    elif any(p != want_path for p in paths):
        why.append(f"paths {sorted(set(paths))}, not {want_path}")
    verdict = "PASS" if not why else "FAIL"
    print(f"{verdict}  {name:34} {seconds:6.1f} s  paths {','.join(sorted(set(paths))) or '-'}"
          + (f"  {'; '.join(why)}" if why else ""), flush=True)
    if why:
        print("\n".join("    | " + l for l in text.splitlines()[-30:]), flush=True)
    return not why


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--softrdma", default=str(ROOT / "build" / "tools" / "softrdma"))
    parser.add_argument("--seconds", type=int, default=60, help="ib_write_bw -D")
    parser.add_argument("--pings", type=int, default=1000, help="rping -C")
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--transport", default="auto", choices=["auto", "udp"])
    parser.add_argument("--port", type=int, default=19400)
    args = parser.parse_args()
    env = dict(os.environ, SOFTRDMA_TRANSPORT=args.transport)
    want = "host" if args.transport == "auto" else "udp"
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.hogs} CPU hogs on "
          f"{os.cpu_count()} CPUs; transport {args.transport}", flush=True)
    hogs = start_hogs(args.hogs)
    ok = True
    try:
        bw = ["ib_write_bw", "-p", str(args.port), "-D", str(args.seconds), "-s", "65536"]
        ok &= judge(f"ib_write_bw -D {args.seconds} 64 KiB",
                    run_pair(args.softrdma, bw, bw + ["127.0.0.1"], env, args.seconds + 120),
                    want, r"^\s*65536\s+\d+\s+[\d.]+")
        port = str(args.port + 1)
        srv = ["rping", "-s", "-a", "127.0.0.1", "-p", port, "-C", str(args.pings)]
        cli = ["rping", "-c", "-a", "127.0.0.1", "-p", port, "-C", str(args.pings), "-V", "-v"]
        last = f"ping data: rdma-ping-{args.pings - 1}: "  # rping counts from 0
        ok &= judge(f"rping -C {args.pings} -V",
                    run_pair(args.softrdma, srv, cli, env, 600),
                    want, re.escape(last))
    finally:
        for hog in hogs:
            hog.kill()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
