#!/usr/bin/env python3
"""Checks the layering of DESIGN.md §2 on the sources: each folder of src/ may
include only the folders (or single headers) listed for it (and the traffic
oracle, in tests/support/, only itself). CMake's PRIVATE links
catch a wrong arrow at link time; this catches a wrong #include, which compiles
because every layer's include root is src/. Run by ctest (layering).

  check_layers.py SRC_DIR      exit 0: clean; 1: lists every violation
  check_layers.py tests/support
"""
import pathlib
import re
import sys

# Folder -> what it may include. "transport/transport.h" alone is the interface
# the engine is handed; the implementations stay out of the engine and the verbs.
ALLOWED = {
    "wire": {"wire"},
    "transport": {"wire", "transport"},
    "progress": {"progress"},
    # The same-host path: node segments and cross-memory attach, below the engine;
    # a peer wakes the owner's progress loop by its protocol (one header).
    "samehost": {"wire", "samehost", "transport/transport.h", "progress/wake_word.h"},
    "engine": {"wire", "engine", "samehost", "transport/transport.h", "transport/stream.h"},
    "runtime": {"wire", "engine", "progress", "samehost", "transport", "runtime"},
    "verbs": {"wire", "engine", "runtime", "verbs", "progress", "transport/transport.h"},
    # librdmacm sits on the public verbs API (and the pure wire code for CM MADs),
    # never on the engine: it must work as a separate library over libibverbs.so.1.
    "rdmacm": {"wire", "rdmacm"},
    # tests/support/traffic, the traffic oracle (run on tests/support): an
    # ordinary verbs program, <infiniband/verbs.h> and nothing of softrdma's.
    "traffic": {"traffic"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def allowed(layer, header):
    rules = ALLOWED.get(layer)
    if rules is None or "/" not in header:
        return True  # a folder without rules, or a same-folder relative include
    return header.split("/")[0] in rules or header in rules


def main():
    src = pathlib.Path(sys.argv[1])
    bad = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".c"):
            continue
        layer = path.relative_to(src).parts[0]
        for header in INCLUDE.findall(path.read_text(errors="replace")):
            if not allowed(layer, header):
                bad.append(f"{path.relative_to(src)}: includes {header}")
    for line in bad:
        print("layering violation:", line)
    print(f"check_layers: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
