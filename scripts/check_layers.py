#!/usr/bin/env python3
"""Checks the layering of DESIGN.md §2 on the sources: each folder of src/ may
include only the folders (or single headers) listed for it (and the traffic
oracle, in tests/support/, only itself). CMake's PRIVATE links
catch a wrong arrow at link time; this catches a wrong #include, which compiles
because every layer's include root is src/. Run by ctest (layering).

  check_layers.py SRC_DIR      exit 0: clean; 1: lists every violation
  check_layers.py tests/support
  check_layers.py --expect N DIR   exit 0 only when DIR has exactly N violations
                                   (the check's own test: tests/data/layering_back_arrows)
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

# Inside the engine (docs/decisions/engine-layout.md): the core (the verbs objects,
# the device, the turn: files directly in engine/) knows no wire family; each
# family (roce/, iwarp/) sits on the core and never on another family. Keyed by
# the folder under src/engine ("" is the core); a value lists what that folder
# may include of the engine ("" again the core's own files; a folder's own files
# are always allowed). A family is given its device by the runtime
# (engine::FamilyMaker), so nothing in the core needs to name one.
ENGINE_ALLOWED = {
    # The core and the same-host path's shared parts (host/: the executor a device
    # owns, the receive queue peers consume, what peers place) are one level:
    # every family may use the same-host path (docs/decisions/same-host-executor.md).
    "": {"", "host"},
    "host": {""},
    "roce": {"", "host", "rc", "ud"},
    # RoCE's connected and datagram protocols, under its family; they reach the
    # family's egress (tx_batch.h) and protocol interface, never its ingress. RC's
    # execution on a same-host peer is RC's (rc/host_*.cc), behind host/executor.h.
    "rc": {"", "host", "roce/protocol.h", "roce/tx_batch.h"},
    "ud": {"", "host", "roce/protocol.h", "roce/tx_batch.h"},
    "iwarp": {"", "host"},
}


def allowed(layer, header):
    rules = ALLOWED.get(layer)
    if rules is None or "/" not in header:
        return True  # a folder without rules, or a same-folder relative include
    return header.split("/")[0] in rules or header in rules


def engine_allowed(parts, header):
    """parts: the including file's path under src/engine; header: "engine/..."."""
    folder = parts[0] if len(parts) > 1 else ""
    target = header.split("/")[1:]
    target_folder = target[0] if len(target) > 1 else ""
    if target_folder == folder:
        return True
    rules = ENGINE_ALLOWED.get(folder)
    if rules is None:
        return False  # a new engine folder gets its rule before its first include
    return target_folder in rules or "/".join(target) in rules


def main():
    expect = None
    if sys.argv[1] == "--expect":
        expect = int(sys.argv[2])
        del sys.argv[1:3]
    src = pathlib.Path(sys.argv[1])
    bad = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc", ".c"):
            continue
        parts = path.relative_to(src).parts
        layer = parts[0]
        for header in INCLUDE.findall(path.read_text(errors="replace")):
            if not allowed(layer, header):
                bad.append(f"{path.relative_to(src)}: includes {header}")
            elif layer == "engine" and header.startswith("engine/") and \
                    not engine_allowed(parts[1:], header):
                bad.append(f"{path.relative_to(src)}: includes {header} (engine sub-layer)")
    for line in bad:
        print("layering violation:", line)
    print(f"check_layers: {len(bad)} violation(s)")
    if expect is not None:
        return 0 if len(bad) == expect else 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
