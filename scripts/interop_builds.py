"""What scripts/interop.py builds before its cases run: programs and a module for
the guest (shared with it at /mnt/share), and the host side's connect gate."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_verbs_ops(share):
    source = ROOT / "tests" / "peer-vm" / "verbs_ops.c"
    subprocess.run(["cc", "-O2", "-o", f"{share}/verbs_ops", str(source), "-libverbs"],
                   check=True)


def build_siw_crc_module(share, workdir, peer_vm_cache, module_name):
    """siw.ko with `mpa_crc_required = true` (siw_main.c; a const, not a parameter),
    from the siw source the harness built the guest's siw.ko from, for the guest's
    kernel. Kept in ~/.cache/softrdma-interop and built again only when that
    source is newer (about 20 s)."""
    kernel = (peer_vm_cache / "kernel-release").read_text().strip()
    source = peer_vm_cache / "siw-src"
    cached = Path.home() / ".cache" / "softrdma-interop" / f"siw-crc-{kernel}.ko"
    if not cached.exists() or cached.stat().st_mtime < (source / "siw_main.c").stat().st_mtime:
        tree = (workdir / "siw-crc-src").resolve()  # make -C elsewhere: M= must be absolute
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("*.o", "*.ko", ".*.cmd"))
        main_c = tree / "siw_main.c"
        text = main_c.read_text()
        stock = "const bool mpa_crc_required;"
        if stock not in text:
            sys.exit(f"interop: {source}/siw_main.c has no '{stock}' to change")
        main_c.write_text(text.replace(stock, "const bool mpa_crc_required = true;"))
        make = subprocess.run(["make", "-s", "-C", f"/usr/src/linux-headers-{kernel}", f"M={tree}",
                               "CONFIG_RDMA_SIW=m", "modules"], capture_output=True, text=True)
        if make.returncode != 0:
            sys.exit(f"interop: building siw.ko with CRC required failed:\n{make.stderr}")
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tree / "siw.ko", cached)
    shutil.copy(cached, Path(share) / module_name)


def build_connect_gate(share, name):
    """tests/peer-vm/connect_gate.c, preloaded on softrdma's side of listen_gate cases."""
    source = ROOT / "tests" / "peer-vm" / "connect_gate.c"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", f"{share}/{name}", str(source), "-ldl"],
                   check=True)
