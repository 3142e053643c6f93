#!/usr/bin/env python3
"""Runs a real, unmodified rdma-core or perftest binary on softrdma's
libibverbs.so.1 (LD_LIBRARY_PATH at the build tree's lib/) and checks its exit
status and output. Used by the conformance ctests (tests/conformance/CMakeLists.txt).

  run_client.py [--lib-dir DIR] [--preload LIB] [--expect RE]... -- CMD ARGS...
      one process (ibv_devices, ibv_devinfo)
  run_client.py --lib-dir DIR --pair --port P [--expect RE]... [--expect-server RE]...
                -- CMD ARGS...
      a server (CMD ARGS -p P) and, once it listens on TCP port P, a client
      (CMD ARGS -p P 127.0.0.1); both must exit 0. --expect applies to the
      client's output, --expect-server to the server's.

  run_client.py --lib-dir DIR --cm-pair --port P --server-args "..." --client-args "..."
                -- CMD
      the same for rdma_cm programs (rping, ucmatose, udaddy, rdma_server/client):
      the server is CMD SERVER-ARGS and the client CMD CLIENT-ARGS, "{port}" in
      either replaced by P; the client starts once the server holds the port in
      softrdma's librdmacm (its reservation in /proc/net/unix).

Each --expect is a Python regular expression (MULTILINE) that must match.
--env NAME=VALUE sets a variable for the clients (a softrdma setting);
--expect-exit N wants that exit status instead of 0 (single process).
--preload puts a sanitizer runtime first in the clients (a sanitized softrdma
library cannot load into an unsanitized binary otherwise).
Waiting for the server to listen reads /proc/net/tcp{,6}: a probe connection
would be taken for the client by the one-connection servers.

A client that dies of a signal is diagnosed: each runs in an empty directory of
its own with core dumps allowed, and the core such a death leaves there (the
kernel's core_pattern "core" is relative to the process's directory) is read by
gdb, whose backtrace of every thread follows the client's output. Nothing is
left behind: the directory goes with the run.
"""
import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def listening(port):
    want = f"{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[1].rsplit(":", 1)[1] == want and fields[3] == LISTEN:
                        return True
        except OSError:
            continue
    return False


def cm_listening(port):
    """True when a softrdma librdmacm id holds `port` (docs/decisions/rdma-cm.md:
    an abstract unix socket @softrdma-rdmacm/<ps>/<port>/<address>)."""
    needle = f"@softrdma-rdmacm/"
    try:
        with open("/proc/net/unix") as f:
            for line in f:
                name = line.split()[-1] if len(line.split()) >= 8 else ""
                if name.startswith(needle) and name.split("/")[2] == str(port):
                    return True
    except OSError:
        pass
    return False


def environment(args):
    env = dict(os.environ)
    if args.lib_dir:  # none: the command arranges it (`softrdma run`)
        env["LD_LIBRARY_PATH"] = args.lib_dir + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    # A pair shares one address of its own (issue 27: two processes of a host on
    # one address, as every process of a host is with nothing set), one that no
    # other test uses, unless the test names its own address or sharing.
    if (args.pair or args.cm_pair) and args.port:
        named = {a.split("=", 1)[0] for a in args.env}
        if "SOFTRDMA_ADDR" not in named and "SOFTRDMA_SHARE_ADDRESS" not in named:
            env["SOFTRDMA_ADDR"] = f"127.200.{(args.port >> 8) & 0xff}.{args.port & 0xff}"
            env["SOFTRDMA_SHARE_ADDRESS"] = "1"
    for assignment in args.env:
        name, _, value = assignment.partition("=")
        env[name] = value
    if args.preload:
        env["LD_PRELOAD"] = args.preload
    # The system binaries' own leaks at exit are not softrdma's to fix (in a
    # sanitizer build `softrdma run` preloads ASan by itself: OWN_ENVIRONMENT
    # tests too); softrdma's are found by its own tests under ASan.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def allow_core_dumps():
    """Core dumps for the clients (the limit is inherited): the soft limit up to
    the hard one, which an unprivileged process may do."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    except (ValueError, OSError):
        pass


def start(cmd, env):
    # Output goes to a file, not a pipe: a server printing more than a pipe holds
    # while the client is being waited for would block (rping -v -S 65535).
    out = tempfile.TemporaryFile(mode="w+")
    # The directory a core dump of this client lands in (one each: the server's
    # and the client's would both be "core"); the clients take no relative paths.
    core_dir = tempfile.mkdtemp(prefix="softrdma-client-")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=core_dir)
    proc.output_file = out
    proc.core_dir = core_dir
    return proc


def output_so_far(proc):
    """What a started process has printed until now (its output file, read in place)."""
    return os.pread(proc.output_file.fileno(), 1 << 20, 0).decode(errors="replace")


def finish(proc, deadline):
    """Waits until the deadline; kills the process group after it. Returns
    (exit status or None on timeout, output); proc.crash_report says how a
    client that died of a signal died (crash_report)."""
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = None
    proc.crash_report = ""
    if status is not None and status < 0:
        proc.crash_report = crash_report(proc, -status, deadline)
    shutil.rmtree(proc.core_dir, ignore_errors=True)
    proc.output_file.seek(0)
    return status, proc.output_file.read()


# signal(7): the signals whose default action is to dump core.
DUMPING_SIGNALS = {signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT, signal.SIGBUS,
                   signal.SIGFPE, signal.SIGSEGV, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS}


def crash_report(proc, signum, deadline):
    """The backtrace of every thread of a client killed by `signum`, from the core
    it left in its directory, or why there is none."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    head = f"===== died of {name} (pid {proc.pid})"
    cores = sorted(f for f in os.listdir(proc.core_dir) if f.startswith("core"))
    if not cores and signum not in DUMPING_SIGNALS:
        return f"{head}: no core dump (this signal leaves none)"
    if not cores:
        try:
            with open("/proc/sys/kernel/core_pattern") as f:
                pattern = f.read().strip()
        except OSError:
            pattern = "?"
        limit = resource.getrlimit(resource.RLIMIT_CORE)[0]
        return (f"{head}: no core dump to read (core_pattern {pattern!r}, "
                f"RLIMIT_CORE {limit})")
    gdb = shutil.which("gdb")
    if gdb is None:
        return f"{head}: gdb is not installed (scripts/install-deps.sh), no backtrace"
    core = os.path.join(proc.core_dir, cores[0])
    budget = time.monotonic() + min(120, max(20, deadline + 25 - time.monotonic()))
    # The program is the one the core names (AT_EXECFN), not necessarily the
    # command started (`softrdma run` and env(1) exec it); with it gdb reads the
    # symbols of the libraries the core lists.
    auxv = run_gdb([gdb, "-nx", "-batch", "-ex", "info auxv", "-c", core], budget)
    program = re.search(r'AT_EXECFN\s.*"(.+)"', auxv)
    cmd = [gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off",
           "-ex", "info sharedlibrary", "-ex", "thread apply all bt"]
    if program and os.path.isabs(program.group(1)):
        cmd.append(program.group(1))
    cmd += ["-c", core]
    return f"{head}: backtrace of its core ({' '.join(cmd[1:])})\n{run_gdb(cmd, budget)}"


def run_gdb(cmd, budget):
    """gdb's output (never waiting for a debuginfod server nor past `budget`)."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL,
                              timeout=max(1, budget - time.monotonic()),
                              env=dict(os.environ, DEBUGINFOD_URLS="")).stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        return (out or "") + "\n(gdb timed out)"


def check(name, status, output, expects, want_status=0, crash_report=""):
    ok = True
    print(f"===== {name}: exit {status if status is not None else 'TIMEOUT'}")
    print(output)
    if crash_report:
        print(crash_report)
    if status != want_status:
        print(f"===== {name}: expected exit status {want_status}")
        ok = False
    for pattern in expects:
        if not re.search(pattern, output, re.MULTILINE):
            print(f"===== {name}: expected output not found: {pattern!r}")
            ok = False
    return ok


def run_single(args, env):
    deadline = time.monotonic() + args.timeout
    proc = start(args.command, env)
    status, out = finish(proc, deadline)
    return check(" ".join(args.command), status, out, args.expect, args.expect_exit,
                 proc.crash_report)


# Failures of the tools themselves, not of softrdma; only these are run again:
# - perftest measures the CPU clock before it runs and gives up when the fit is
#   poor ("Correlation coefficient r^2: 0.65 < 0.9" ... "Can't produce a report"),
#   which a loaded machine causes;
# - libfabric 1.17's ofi_rxm (Debian 12) closes a connection's endpoint and then
#   drains the CQ, reposting a receive buffer to the endpoint it has just freed
#   (rxm_close_conn, then rxm_post_recv: SIGSEGV at libfabric.so.1+0xb7882) when
#   the peer's disconnect is handled before its last message was polled; fixed
#   upstream by draining first (libfabric 697688386). An RNIC's CQ, like
#   softrdma's and rxe's, still holds a destroyed QP's completions; mlx5's does
#   not (docs/conformance.md "Teardown").
# - perftest 4.5's -R (Debian 12) makes its data connection right after a control
#   handshake without waiting for the server's second rdma_listen; over iWARP (a
#   TCP listener, as the kernel's iw_cm) an early connect is refused, REJECTED
#   -111, and its retry then reads the ids it has just freed (SIGSEGV in
#   rdma_resolve_addr); fixed upstream in perftest 3d9d8d0 (26.04.17). The iWARP
#   perftest tests now run their client with --gate (connect_gate.c), which waits
#   for the server's second listener: beside two busy loops, 36 runs without a
#   retry, where one such test had needed 6 retries in 8 runs without it.
TOOL_FAILURES = (
    (re.compile(r"Correlation coefficient|Can't produce a report"),
     "perftest's CPU-clock calibration failed"),
    (re.compile(r"RDMA_CM_EVENT_REJECTED; error: -111"),
     "perftest 4.5's -R connected before the server's second rdma_listen"),
    (re.compile(r"libfabric\.so\.1\(\+0xb7882\)"),
     "libfabric 1.17's rxm reposted a receive on an endpoint it had closed"),
)
# perftest -R lost its race three runs in a row beside other tests, and over iWARP
# five in a row once in a whole suite's run (each attempt loses it about one time
# in five on a loaded machine, measured: 6 retries in 8 runs beside two busy loops).
TOOL_ATTEMPTS = 8


def tool_failure(output):
    return next((why for pattern, why in TOOL_FAILURES if pattern.search(output)), None)


def run_pair(args, env):
    for attempt in range(1, TOOL_ATTEMPTS + 1):
        ok, output = run_pair_once(args, env)
        why = None if ok else tool_failure(output)
        if ok or attempt == TOOL_ATTEMPTS or why is None:
            return ok
        print("===== %s (attempt %d of %d): running again" % (why, attempt, TOOL_ATTEMPTS),
              flush=True)
    return False


def run_pair_once(args, env):
    """One server/client run; (passed, both outputs)."""
    deadline = time.monotonic() + args.timeout
    if args.cm_pair:
        server_cmd = args.command + args.server_args.format(port=args.port).split()
        client_cmd = args.command + args.client_args.format(port=args.port).split()
        # rdma_cm programs hold the port in librdmacm; some (fi_pingpong)
        # exchange addresses over a TCP port first.
        ready = lambda port: cm_listening(port) or listening(port)
        if env.get("SOFTRDMA_WIRE") == "iwarp":
            # iWARP's rdma_listen is a TCP listener; the port's reservation is
            # taken before it, at rdma_bind_addr, and a connect in between is
            # refused (ECONNREFUSED), as with the kernel's iw_cm.
            ready = listening
        if args.ready_port:  # a program with a fixed port of its own (udaddy: 7174)
            ready_port = args.ready_port
            ready = lambda _: cm_listening(ready_port)
        if args.ready_output:  # no port to wait for (mckey joins a group): its words
            ready = lambda _: re.search(args.ready_output, output_so_far(server)) is not None
    else:
        server_cmd = args.command + ["-p", str(args.port)]
        client_cmd = server_cmd + ["127.0.0.1"]
        ready = listening
    client_env = env
    if args.gate:
        # perftest 4.5's -R race (TOOL_FAILURES): the client waits for the event it
        # needs instead (tests/peer-vm/connect_gate.c), after any sanitizer runtime.
        client_env = dict(env, CONNECT_GATE_TCP_PORT=str(args.port),
                          LD_PRELOAD=" ".join(filter(None, [env.get("LD_PRELOAD"), args.gate])))
    server = start(server_cmd, env)
    while not ready(args.port):
        if server.poll() is not None or time.monotonic() > deadline:
            status, out = finish(server, deadline)
            check("server (never listened)", status, out, [], crash_report=server.crash_report)
            return False, out
        time.sleep(0.02)  # the pace of a poll with a deadline: no fd says "listening"
    client = start(client_cmd, client_env)
    c_status, c_out = finish(client, deadline)
    if c_status != 0:  # a failed client leaves the server waiting: stop it
        deadline = min(deadline, time.monotonic() + 5)
    s_status, s_out = finish(server, deadline)
    ok = check("server: " + " ".join(server_cmd), s_status, s_out, args.expect_server,
               crash_report=server.crash_report)
    ok = check("client: " + " ".join(client_cmd), c_status, c_out, args.expect,
               crash_report=client.crash_report) and ok
    return ok, (c_out or "") + (s_out or "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib-dir", default="")
    ap.add_argument("--gate", default="",
                    help="connect_gate.so, preloaded in the client of a --cm-pair over iWARP: "
                         "its second rdma_connect waits for the server's second listener")
    ap.add_argument("--preload", default="")
    ap.add_argument("--pair", action="store_true")
    ap.add_argument("--port", type=int)
    ap.add_argument("--cm-pair", action="store_true")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--client-args", default="")
    ap.add_argument("--ready-port", type=int, default=0,
                    help="--cm-pair: the server holds this port, not --port")
    ap.add_argument("--ready-output", default="",
                    help="--cm-pair: the server is ready once its output matches this")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--expect-server", action="append", default=[])
    ap.add_argument("--expect-exit", type=int, default=0,
                    help="exit status wanted (single process only)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in the clients' environment")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        ap.error("no command")
    if (args.pair or args.cm_pair) and not args.port:
        ap.error("--pair and --cm-pair need --port")
    env = environment(args)
    allow_core_dumps()
    ok = run_pair(args, env) if args.pair or args.cm_pair else run_single(args, env)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
