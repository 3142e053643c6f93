#!/usr/bin/env python3
"""Issue 8: with the fault injection dropping 10 % of packets both ways, N
consecutive rping connect/transfer/disconnect cycles succeed (every cycle's
pings checked by rping itself: -v prints each, and rping fails on a mismatch or
a lost connection). A persistent rping server (-P) takes each client in turn.

  rping_loss.py --softrdma TOOL --port P [--cycles 50] [--loss 0.1]
"""
import argparse
import os
import signal
import subprocess
import sys
import time


def holds_port(port):
    """softrdma's librdmacm holds a port with @softrdma-rdmacm/<ps>/<port>/<addr>."""
    with open("/proc/net/unix") as f:
        return any(f"@softrdma-rdmacm/106/{port}/" in line for line in f)


# rping's own teardown race (its event thread reads the channel its main thread
# destroys as it exits, rdma-core 44's rping.c) once failed a cycle here with
# "rdma_get_cm_event: Bad file descriptor"; softrdma's librdmacm now makes such a
# late reader wait (src/rdmacm/channel.cc), so a cycle is never run again.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--softrdma", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--loss", type=float, default=0.1)
    ap.add_argument("--pings", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ)
    env["SOFTRDMA_FAULTS"] = f"loss={args.loss},seed=1"
    # In a sanitizer build: rping's own leaks at exit are not softrdma's to fix.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    server = subprocess.Popen([args.softrdma, "run", "--", "rping", "-s", "-P", "-a", "127.0.0.1",
                               "-p", str(args.port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    failures = 0
    try:
        deadline = time.monotonic() + 60
        while not holds_port(args.port):
            if server.poll() is not None or time.monotonic() > deadline:
                print("rping server never listened")
                return 1
            time.sleep(0.02)  # the pace of a poll with a deadline
        for cycle in range(1, args.cycles + 1):
            env["SOFTRDMA_FAULTS"] = f"loss={args.loss},seed={cycle + 1}"
            last = f"ping data: rdma-ping-{args.pings - 1}: "
            client = subprocess.run(
                [args.softrdma, "run", "--", "rping", "-c", "-a", "127.0.0.1", "-p",
                 str(args.port), "-C", str(args.pings), "-v"],
                env=env, capture_output=True, text=True, timeout=120)
            ok = client.returncode == 0 and last in client.stdout
            print(f"cycle {cycle}: {'ok' if ok else 'FAILED (exit %d)' % client.returncode}")
            if not ok:
                failures += 1
                print(client.stdout[-2000:], client.stderr[-2000:])
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    print(f"{args.cycles - failures} of {args.cycles} cycles succeeded at {args.loss:.0%} loss")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
