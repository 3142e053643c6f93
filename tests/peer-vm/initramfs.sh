# Sourced by build.sh: make_initramfs writes $cache/initramfs.gz, the guest's whole
# root file system (a busybox initramfs: nothing to mount, nothing to install).

# What the guest runs: the kernel tools scripts/interop.py starts, ibv_devinfo to
# look at the device by hand, and iproute2's rdma (rdma link add, rdma res show
# cm_id) and ip (busybox's applet lacks `-6 addr show ... tentative`).
guest_programs=(ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong
                ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat
                rping ucmatose udaddy rstream riostream)
# Modules, with what they need: the guest's network and 9p share (virtio), the two
# RDMA devices, the verbs and rdma_cm character devices, and the CRC shashes that
# rxe ("crc32") and siw ("crc32c") ask the crypto API for by name at run time.
guest_modules=(virtio_pci virtio_net 9pnet_virtio 9p rdma_rxe siw ib_uverbs rdma_ucm
               crc32_generic crc32c_generic)

# copy_program FILE DIR ROOT STAGE_LIBS: FILE into ROOT/DIR, and every library it
# links (ldd, the staged rdma-core first) into ROOT's single library directory.
copy_program() {
  local file=$1 dir=$2 root=$3 libs=$4 line lib needs
  cp -L "$file" "$root/$dir/"
  while read -r line; do
    lib=$(awk '/=>/ {print $3; next} /^\// {print $1}' <<<"$line")
    [[ -n $lib && -f $lib ]] || continue
    if [[ $lib == */ld-linux-x86-64.so.2 ]]; then
      cp -Ln "$lib" "$root/lib64/"
    else
      cp -Ln "$lib" "$root/usr/lib/x86_64-linux-gnu/"
    fi
  done < <(LD_LIBRARY_PATH=$libs ldd "$file" | tr -d '\t')
  # The whole output first: `ldd | grep -q` under pipefail can fail by SIGPIPE.
  needs=$(LD_LIBRARY_PATH=$libs ldd "$file")
  if grep -q 'not found' <<<"$needs"; then
    echo "peer-vm build: $file: a library is missing" >&2
    return 1
  fi
}

# copy_modules IMAGE RELEASE ROOT: guest_modules and their dependencies, and
# ROOT/etc/modules.order: the order init loads them in (dependencies first).
copy_modules() {
  local image=$1 release=$2 root=$3 module ko rel
  : >"$root/etc/modules.order"
  for module in "${guest_modules[@]}"; do
    modprobe -d "$image" -S "$release" --show-depends "$module" >"$root/tmp.deps" ||
      { echo "peer-vm build: no module $module in $release" >&2; return 1; }
    while read -r ko; do
      rel=${ko#"$image"/}
      grep -qxF "/$rel" "$root/etc/modules.order" && continue
      mkdir -p "$root/$(dirname "$rel")"
      cp "$ko" "$root/$rel"
      echo "/$rel" >>"$root/etc/modules.order"
    done < <(awk '$1 == "insmod" {print $2}' "$root/tmp.deps")
  done
  rm -f "$root/tmp.deps"
  cp "$image/lib/modules/$release"/modules.{builtin,builtin.modinfo,order} \
    "$root/lib/modules/$release/"
  depmod -b "$root" "$release"  # the alias table: the crypto API's requests by name
}

make_initramfs() {
  local cache=$1 release=$2 init=$3
  shift 3
  local stage=$cache/stage root=$cache/rootfs pkg name file
  rm -rf "$stage" "$root"
  for pkg in "$@"; do
    dpkg-deb -x "$(compgen -G "$cache/debs/${pkg}_*.deb" | head -n 1)" "$stage"
  done
  mkdir -p "$root"/{usr/bin,usr/lib/x86_64-linux-gnu/libibverbs,lib64,etc/libibverbs.d} \
    "$root"/{dev,proc,sys,tmp,run,root,mnt/run,mnt/share}
  ln -s usr/bin "$root/bin"
  ln -s usr/bin "$root/sbin"
  ln -s usr/lib "$root/lib"

  cp /bin/busybox "$root/usr/bin/busybox"
  for name in $(/bin/busybox --list); do
    [[ -e $root/usr/bin/$name ]] || ln -s busybox "$root/usr/bin/$name"
  done

  local libs=$stage/usr/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu/libibverbs
  for name in "${guest_programs[@]}"; do
    file=$(compgen -G "$stage/usr/bin/$name" || true)
    [[ -n $file ]] || { echo "peer-vm build: $name is in no staged package" >&2; return 1; }
    copy_program "$file" usr/bin "$root" "$libs"
  done
  for name in ip rdma; do  # from the host's iproute2, over busybox's applet of that name
    rm -f "$root/usr/bin/$name"
    copy_program "$(readlink -f "$(command -v "$name")")" usr/bin "$root" "$libs"
  done
  # libibverbs loads a device's provider by the name in /etc/libibverbs.d/.
  for name in rxe siw; do
    copy_program "$(compgen -G "$stage/usr/lib/x86_64-linux-gnu/libibverbs/lib$name-*.so")" \
      usr/lib/x86_64-linux-gnu/libibverbs "$root" "$libs"
    cp "$stage/etc/libibverbs.d/$name.driver" "$root/etc/libibverbs.d/"
  done
  # glibc's pthread_exit and pthread_cancel unwind through libgcc_s, which they
  # dlopen (no ldd shows it): without it rping and rstream abort as they finish.
  cp -L "$(gcc -print-file-name=libgcc_s.so.1)" "$root/usr/lib/x86_64-linux-gnu/"

  mkdir -p "$root/lib/modules/$release"
  copy_modules "$cache/image" "$release" "$root"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
  cp /etc/services /etc/protocols "$root/etc/"  # rping and rstream resolve service names
  install -m 755 "$init" "$root/init"

  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$cache/initramfs.tmp"
  mv "$cache/initramfs.tmp" "$cache/initramfs.gz"
}
