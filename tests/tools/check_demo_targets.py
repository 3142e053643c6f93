#!/usr/bin/env python3
"""Issue 14 defect 6: after ./scripts/demo.sh, every command the README then shows
must run on softrdma. Checks that the targets demo.sh builds produce every drop-in
library those commands load (librdmacm.so.1 for rping and rstream, the vendor
stubs for perftest, ...) and the `softrdma` command itself.

  check_demo_targets.py README DEMO_SH MANIFEST

MANIFEST is written by CMake (tools/CMakeLists.txt): "group NAME TARGET..." for
softrdma-dropins, "file TARGET FILENAME" for each drop-in. Exit 0: covered;
1: lists what is missing.
"""
import re
import shutil
import subprocess
import sys


def demo_targets(demo_sh):
    """The --target arguments of demo.sh's `cmake --build` (continuations joined)."""
    text = open(demo_sh).read().replace("\\\n", " ")
    for line in text.splitlines():
        if "cmake --build" not in line or "--target" not in line:
            continue
        words = line.split("--target", 1)[1].split()
        targets = []
        for word in words:
            if word.startswith("-") or word in ("||", "&&", ";", "]];"):
                break
            targets.append(word)
        return targets
    return []


def read_manifest(path):
    groups, files = {}, {}
    for line in open(path):
        words = line.split()
        if words and words[0] == "group":
            groups[words[1]] = words[2:]
        elif words and words[0] == "file":
            files[words[1]] = words[2]
    return groups, files


def readme_commands(readme):
    """Programs the README runs through `softrdma run --`, and whether it calls
    the `softrdma` command at all."""
    text = open(readme).read()
    programs = re.findall(r"build/tools/softrdma run (?:--\S+ )*-- (\S+)", text)
    return sorted(set(programs)), "build/tools/softrdma" in text


def sonames_loaded(program):
    """Every library `program` loads at start (ldd: transitively)."""
    out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if ".so" in line}


def main():
    readme, demo_sh, manifest = sys.argv[1:4]
    groups, files = read_manifest(manifest)
    built = set()
    for target in demo_targets(demo_sh):
        for member in groups.get(target, [target]):
            if member in files:
                built.add(files[member])
    dropin_files = set(files.values())
    programs, uses_tool = readme_commands(readme)
    missing = []
    if not programs:
        missing.append("the README shows no `softrdma run --` command: parser out of date?")
    if uses_tool and files.get("softrdma") not in built:
        missing.append("the README calls build/tools/softrdma; demo.sh does not build it")
    for program in programs:
        path = shutil.which(program)
        if path is None:
            missing.append(f"{program}: not installed (scripts/install-deps.sh installs it)")
            continue
        needed = sonames_loaded(path) & dropin_files
        for soname in sorted(needed - built):
            missing.append(f"{program} loads {soname}; demo.sh does not build it")
        print(f"{program}: needs {sorted(needed)}")
    print(f"demo.sh builds: {sorted(built)}")
    for line in missing:
        print("MISSING:", line)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
