#!/usr/bin/env bash
# check_shell.py's own test: three findings, and the lines it must let pass.
set -euo pipefail
/bin/busybox --list | grep -qx sh || exit 1            # finding
if ldd /bin/true | grep -q 'not found'; then exit 1; fi  # finding
dmesg |grep --quiet rxe && echo yes                      # finding
for _ in 1 2; do ss -ltn | grep -q LISTEN && break; done # a retry: exempt
out=$(ldd /bin/true); grep -q 'not found' <<<"$out" || true
# a comment: | grep -q
