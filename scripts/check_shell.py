#!/usr/bin/env python3
"""check_shell.py [--expect N] [--skip DIR] DIR...: the project's bash scripts against one pitfall.

Under `set -o pipefail`, `producer | grep -q PATTERN` fails when grep finds the
pattern and exits before the producer's last write: the producer dies of SIGPIPE
and the pipeline's status is 141, though the pattern was there. Whether it
happens depends on scheduling, so it shows only under load; CI's peer-VM build
failed this way (`busybox --list` writes one applet per write()). The fix is the
whole output first: `out=$(producer); grep -q PATTERN <<<"$out"`.

A line that retries until it succeeds (`... | grep -q . && break`) is exempt:
a false miss there costs one more round. Prints each finding; exits 1 if there
are any, or, with --expect N, unless there are exactly N.
"""
import argparse
import pathlib
import re
import sys

PIPE_INTO_GREP_Q = re.compile(r"(?<!\|)\|(?!\|)\s*grep\s+(-\w*q\w*|--quiet)\b")


def scripts(roots, skip):
    for root in roots:
        root = pathlib.Path(root)
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in candidates:
            if not path.is_file() or path.suffix not in ("", ".sh"):
                continue
            if any(path.is_relative_to(pathlib.Path(s)) for s in skip):
                continue
            try:
                text = path.read_text()
            except (UnicodeDecodeError, PermissionError):
                continue
            if text.startswith("#!") and "bash" in text.splitlines()[0] or path.suffix == ".sh":
                yield path, text


def findings(path, text):
    if "pipefail" not in text:
        return
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split(" #", 1)[0]
        if code.lstrip().startswith("#") or "&& break" in code:
            continue
        if PIPE_INTO_GREP_Q.search(code):
            yield f"{path}:{number}: `| grep -q` under pipefail can fail by SIGPIPE: {line.strip()}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", type=int)
    parser.add_argument("--skip", action="append", default=[], help="a folder not to read")
    parser.add_argument("roots", nargs="+")
    args = parser.parse_args()
    found = [f for path, text in scripts(args.roots, args.skip) for f in findings(path, text)]
    for finding in found:
        print(finding)
    if args.expect is not None:
        if len(found) != args.expect:
            print(f"expected {args.expect} findings, got {len(found)}")
            return 1
        return 0
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
