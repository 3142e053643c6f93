#!/usr/bin/env python3
"""rdma-core's pyverbs test suite against softrdma (issue 7).

    pyverbs_suite.py --softrdma BIN --expected FILE [--write-table MD] [--update]

Copies Debian's suite (python3-pyverbs, /usr/share/doc/rdma-core/tests) to a
temporary directory, runs every test under `softrdma run` with a result class that
records each test's id, outcome and skip reason, and compares with FILE (one line
per test: id, outcome, reason; tab-separated). It fails when

  - a test errors or fails,
  - a test the expectations call "pass" does not pass, or
  - a test skips for a reason the expectations do not give for it
    (so a capability lost shows, and no skip is accepted unexplained).

A test that passes where a skip was expected is reported ("--update" rewrites
FILE). With --listed-errors (the iWARP run, SOFTRDMA_WIRE=iwarp), an error or a
failure is accepted when FILE lists that test with that outcome and that exact
message: rdma-core's suite knows no iWARP and connects RC QPs by ibv_modify_qp,
which an iWARP device refuses (EINVAL at RTS, as siw does); a test that errs
differently, or starts to pass, still shows. An outcome "race" in FILE (iWARP
only) accepts a pass or that exact error, and nothing else: the test reads the
target's memory as soon as the initiator's WRITE completed, which RFC 5040 does
not promise (a WRITE completes once its bytes are on the stream, as siw's do; the
target places them when its engine reads them), so its outcome depends on the
scheduler. --write-table writes the per-test table of docs/conformance.md's pyverbs
section. Vendor tests (mlx5, EFA, CUDA) are listed apart: they skip on any
non-vendor device.
"""

import argparse
import collections
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

SUITE = "/usr/share/doc/rdma-core/tests"
HUGE_PAGES = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

# Runs in the suite's directory, under `softrdma run`: what run_tests.py does,
# with a result class that writes one JSON line per test.
RUNNER = r'''
import json, os, sys, unittest
from importlib.machinery import SourceFileLoader
from args_parser import parser
sys.argv = [sys.argv[0]]
tests = SourceFileLoader('tests', os.path.join(os.path.dirname(__file__), '__init__.py')).load_module()
parser.parse_args()
out = open(os.environ['PYVERBS_RESULTS'], 'w')
class Recording(unittest.TextTestResult):
    def _put(self, test, outcome, reason=''):
        out.write(json.dumps({'id': test.id(), 'outcome': outcome, 'reason': reason}) + '\n')
        out.flush()
    def addSuccess(self, test):
        super().addSuccess(test); self._put(test, 'pass')
    def addSkip(self, test, reason):
        super().addSkip(test, reason); self._put(test, 'skip', reason)
    def addError(self, test, err):
        super().addError(test, err); self._put(test, 'error', self._exc_info_to_string(err, test).splitlines()[-1])
    def addFailure(self, test, err):
        super().addFailure(test, err); self._put(test, 'fail', self._exc_info_to_string(err, test).splitlines()[-1])
    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err); self._put(test, 'fail', 'expected failure')
    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test); self._put(test, 'fail', 'unexpected success')
suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
unittest.TextTestRunner(verbosity=1, resultclass=Recording).run(suite)
'''

VENDOR_MODULES = ("test_mlx5", "test_efa", "test_cuda")
VENDOR_REASONS = ("MLX5", "EFA", "cuda", "PCI device must be passed")


def is_vendor(test_id, reason):
    module = test_id.split(".")[1] if "." in test_id else test_id
    return module.startswith(VENDOR_MODULES) or any(v in reason for v in VENDOR_REASONS)


def copy_suite(into):
    for name in os.listdir(SUITE):
        src = os.path.join(SUITE, name)
        if name.endswith(".gz"):
            with gzip.open(src, "rb") as f, open(os.path.join(into, name[:-3]), "wb") as g:
                shutil.copyfileobj(f, g)
        elif os.path.isfile(src):
            shutil.copy(src, into)
    with open(os.path.join(into, "softrdma_runner.py"), "w") as f:
        f.write(RUNNER)


class HugePages:
    """Reserves `count` 2 MiB pages for the run, as a user of the suite would (its
    huge-page tests skip without them), and gives them back afterwards. Without
    the right to (not root), the tests skip themselves, saying why."""

    def __init__(self, count):
        self.count, self.before = count, None

    def __enter__(self):
        try:
            with open(HUGE_PAGES) as f:
                self.before = int(f.read())
            if self.before < self.count:
                self.reserve()
        except OSError as e:
            print(f"pyverbs_suite: no 2 MiB pages reserved ({e})")
            self.before = None
        return self

    def reserve(self):
        """The kernel grants what it finds free; say so when that is short (a
        huge-page test would then fail to mmap, not skip)."""
        with open(HUGE_PAGES, "w") as f:
            f.write(str(self.count))
        with open(HUGE_PAGES) as f:
            granted = int(f.read())
        if granted < self.count:
            print(f"pyverbs_suite: only {granted} of {self.count} 2 MiB pages could be reserved")

    def __exit__(self, *exc):
        if self.before is not None and self.before < self.count:
            with open(HUGE_PAGES, "w") as f:
                f.write(str(self.before))


def run_suite(softrdma, timeout, preload):
    with tempfile.TemporaryDirectory(prefix="pyverbs-") as d:
        copy_suite(d)
        results = os.path.join(d, "results.jsonl")
        env = dict(os.environ, PYVERBS_RESULTS=results)
        if preload:  # a sanitized build: its runtime first; Python's own leaks are not ours
            env["LD_PRELOAD"] = preload
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        # Debian's interpreter: python3-pyverbs is installed for it.
        proc = subprocess.run([os.path.abspath(softrdma), "run", "--", "/usr/bin/python3",
                               "softrdma_runner.py"],
                              cwd=d, env=env, timeout=timeout, capture_output=True, text=True)
        sys.stderr.write(proc.stderr[-4000:])
        if not os.path.exists(results):
            sys.exit(f"pyverbs_suite: the suite recorded nothing (exit {proc.returncode})")
        with open(results) as f:
            return [json.loads(line) for line in f if line.strip()]


def read_expected(path):
    expected = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    test_id, outcome, reason = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                    expected[test_id] = (outcome, reason)
    return expected


def write_expected(path, results):
    with open(path, "w") as f:
        f.write("# pyverbs_suite.py --update: test id, outcome, skip reason (tab-separated)\n")
        for r in sorted(results, key=lambda r: r["id"]):
            f.write(f"{r['id']}\t{r['outcome']}\t{r['reason']}\n")


def compare(results, expected, listed_errors=False):
    problems, improvements = [], []
    for r in results:
        want = expected.get(r["id"])
        got = (r["outcome"], r["reason"])
        if listed_errors and want is not None and want[0] == "race":
            if got[0] != "pass" and got != ("error", want[1]):
                problems.append(f"{r['id']}: a pass or '{want[1]}' expected, "
                                f"{got[0]}: {got[1]}")
        elif r["outcome"] in ("error", "fail"):
            if not (listed_errors and want == got):
                problems.append(f"{r['id']}: {r['outcome']}: {r['reason']}")
        elif listed_errors and want is not None and want[0] in ("error", "fail"):
            problems.append(f"{r['id']}: expected to {want[0]} ({want[1]}), {got[0]}")
        elif want is None:
            problems.append(f"{r['id']}: not in the expectations ({got[0]} {got[1]})")
        elif want[0] == "pass" and got[0] != "pass":
            problems.append(f"{r['id']}: expected to pass, {got[0]}: {got[1]}")
        elif want[0] == "skip" and got[0] == "skip" and got[1] != want[1]:
            problems.append(f"{r['id']}: skipped for '{got[1]}', expected '{want[1]}'")
        elif want[0] == "skip" and got[0] == "pass":
            improvements.append(r["id"])
    missing = set(expected) - {r["id"] for r in results}
    problems += [f"{m}: expected but not run" for m in sorted(missing)]
    return problems, improvements


def write_table(path, results):
    counts = collections.Counter()
    rows = []
    for r in sorted(results, key=lambda r: r["id"]):
        vendor = is_vendor(r["id"], r["reason"])
        counts[("vendor" if vendor else "other", r["outcome"])] += 1
        if not vendor:
            rows.append(f"| `{r['id'].removeprefix('tests.')}` | {r['outcome']} | {r['reason']} |")
    other = {o: counts[("other", o)] for o in ("pass", "skip", "fail", "error")}
    vendor = sum(v for (k, _), v in counts.items() if k == "vendor")
    with open(path, "w") as f:
        f.write("<!-- written by tests/conformance/pyverbs_suite.py --write-table -->\n")
        f.write(f"Non-vendor tests: {sum(other.values())}: pass {other['pass']}, "
                f"skip {other['skip']}, fail {other['fail']}, error {other['error']}. "
                f"Vendor tests (mlx5, EFA, CUDA; skipped on any other device): {vendor}.\n\n")
        f.write("| test | result | reason |\n| --- | --- | --- |\n")
        f.write("\n".join(rows) + "\n")
    return other


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--softrdma", required=True)
    ap.add_argument("--expected", required=True)
    ap.add_argument("--write-table")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--listed-errors", action="store_true",
                    help="accept the errors and failures FILE lists with their message")
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--preload", default="", help="a sanitizer runtime to load first")
    ap.add_argument("--huge-pages", type=int, default=64,
                    help="2 MiB pages to reserve for the run (0: none)")
    args = ap.parse_args()
    if not os.path.isdir(SUITE):
        sys.exit(f"pyverbs_suite: {SUITE} is missing (python3-pyverbs; scripts/install-deps.sh)")
    with HugePages(args.huge_pages):
        results = run_suite(args.softrdma, args.timeout, args.preload)
    if args.write_table:
        other = write_table(args.write_table, results)
        print(f"non-vendor: {other}")
    if args.update:
        write_expected(args.expected, results)
    problems, improvements = compare(results, read_expected(args.expected), args.listed_errors)
    outcomes = collections.Counter(r["outcome"] for r in results)
    print(f"pyverbs: {len(results)} tests: {dict(outcomes)}")
    for i in improvements:
        print(f"now passes (run with --update): {i}")
    for p in problems:
        print(f"PROBLEM {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
