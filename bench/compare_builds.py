#!/usr/bin/python3
"""Two builds of softrdma side by side, interleaved in one run (issue 26, 27).

compare.py's cases (the same code, the same floors) for a base build and the
current one, alternating case by case and round by round, so that both meet the
same machine. Prints, per figure, each build's median over the rounds, its
min-max, every value, and the ratio of the medians. Some figures of this 2-core
machine are bimodal (a 1 MiB WRITE moves ~22 Gb/s, or ~11 when the four busy
threads share a core badly): the values show it, and enough rounds make the
medians say which mode is common.

A base build of an older commit, for example 96a31b9:
  git worktree add /tmp/base 96a31b9 && cmake -S /tmp/base -B /tmp/base/build \
      -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/base/build
  bench/compare_builds.py --base /tmp/base/build --rounds 5 \
      --only '^softrdma (ib_|8 B WRITE)|^floor UDP'
"""
import argparse
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import compare  # noqa: E402  (the cases and how each is measured)


def run(base_dir, head_dir, rounds, only):
    benches = {"base": compare.Bench(base_dir, False), "head": compare.Bench(head_dir, False)}
    chosen = {who: [fn for name, fn in compare.cases(b) if re.search(only, name)]
              for who, b in benches.items()}
    failures = []
    for r in range(rounds):
        for i in range(len(chosen["base"])):
            for who in ("base", "head") if r % 2 == 0 else ("head", "base"):
                print("round %d/%d case %d/%d %s" % (r + 1, rounds, i + 1, len(chosen[who]), who),
                      file=sys.stderr, flush=True)
                benches[who].load = compare.machine_state_before()
                try:
                    chosen[who][i]()
                except Exception as e:  # reported, the rest goes on
                    failures.append("%s: %s" % (who, str(e).splitlines()[0]))
    return benches, failures


def values(bench, name):
    return [v for v, _, _ in bench.samples.get(name, [])]


def report(benches, failures, base_label):
    print("| figure | %s: median (min–max) | now: median (min–max) | now / %s | values, %s; now |"
          % (base_label, base_label, base_label))
    print("|---|---:|---:|---:|---|")
    for name in sorted(benches["head"].samples):
        b, h = values(benches["base"], name), values(benches["head"], name)
        if not b or not h:
            continue
        mb, mh = statistics.median(b), statistics.median(h)
        ratio = mh / mb if mb else float("nan")
        print("| %s | %.3g (%.3g–%.3g) | %.3g (%.3g–%.3g) | %.2f | %s; %s |" % (
            name, mb, min(b), max(b), mh, min(h), max(h), ratio,
            " ".join("%.3g" % v for v in b), " ".join("%.3g" % v for v in h)))
    for f in failures:
        print("failed: " + f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the base build directory")
    parser.add_argument("--head", default=os.path.join(ROOT, "build"))
    parser.add_argument("--base-label", default="base")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=r"^softrdma (ib_|8 B WRITE)|^floor UDP")
    args = parser.parse_args()
    benches, failures = run(args.base, args.head, args.rounds, args.only)
    report(benches, failures, args.base_label)
    sys.exit(1 if failures else 0)
