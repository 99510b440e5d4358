#!/bin/bash
# The NVMe-oF lab: one qemu guest (TCG: KVM guests hang on this machine) running Debian's
# 6.1 kernel from a busybox initramfs. Inside it, NS qemu-emulated NVMe drives (each with its
# own IOPS cap, default none) are exported by the kernel's NVMe/TCP target (nvmet) on PORTS
# TCP ports and connected back through /dev/nvme-fabrics, so diskvec runs on real fabric
# block devices (/dev/nvmeXnY, transport tcp, O_DIRECT, io_uring) with the kernel's native
# multipath on or off. A scenario script (run in the guest with busybox sh) does the rest;
# `lab_drop_port N` / `lab_restore_port N` take a target port away and back, as a fabric
# path that vanishes.
#
# usage: scripts/nvme-lab.sh [--ns 2] [--ports 1] [--iops N] [--multipath on|off]
#                            [--ns-mib 2048] [--mem-mib 3072] [--timeout 1800] [--fs ext2|ext4]
#                            [--drives DIR] [--power-off-after SECONDS] [--with BINARY]...
#                            SCENARIO [ARGS...]
# --drives DIR keeps the namespaces' images in DIR across runs (a kept drive is mounted as it
# was left, not formatted); --power-off-after S kills the VM (SIGKILL to qemu: the guest's
# page cache and everything in flight are lost, what reached the drives stays) S seconds
# after the scenario starts, and the run exits 0 with "lab: powered off" on the console;
# --with copies another binary (and the libraries it loads) into the guest's PATH.
# SCENARIO: a shell script run in the guest (examples: scripts/lab/*.sh). It sees
#   LAB_PATHS   mount points of the fabric namespaces, comma-separated (/mnt/p1,/mnt/p2)
#   LAB_DEVICES their block devices, comma-separated
#   PATH        with diskvec and fio
# and prints what it measured; the guest's console is copied to stdout and to
# $LAB_OUT/console.log. Exit status: the scenario's.
#
# What it needs (installed when missing, as root, from Debian's packages): qemu-system-x86,
# busybox-static, kmod, fio; the kernel package is downloaded and unpacked into the cache
# ($DISKVEC_LAB_CACHE, default ~/.cache/diskvec-lab), never installed on the host.
set -euo pipefail

NS=2 PORTS=1 IOPS=0 MULTIPATH=on NS_MIB=2048 MEM_MIB=3072 TIMEOUT=1800 KATO=30
FS=ext2 DRIVES_DIR="" POWER_OFF_AFTER="" EXTRA_BINARIES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fs) FS=$2; shift 2 ;;
    --drives) DRIVES_DIR=$2; shift 2 ;;
    --power-off-after) POWER_OFF_AFTER=$2; shift 2 ;;
    --with) EXTRA_BINARIES+=("$2"); shift 2 ;;
    --ns) NS=$2; shift 2 ;;
    --ports) PORTS=$2; shift 2 ;;
    --iops) IOPS=$2; shift 2 ;;
    --multipath) MULTIPATH=$2; shift 2 ;;
    --ns-mib) NS_MIB=$2; shift 2 ;;
    --mem-mib) MEM_MIB=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [options] SCENARIO [ARGS...] (--help)" >&2; exit 2; }
SCENARIO=$1; shift
[ -f "$SCENARIO" ] || { echo "no scenario $SCENARIO" >&2; exit 2; }
case "$MULTIPATH" in on|off) ;; *) echo "--multipath on|off" >&2; exit 2 ;; esac
[ "$NS" -ge 1 ] && [ "$NS" -le 8 ] || { echo "--ns 1..8" >&2; exit 2; }
[ "$PORTS" -ge 1 ] && [ "$PORTS" -le 2 ] || { echo "--ports 1 or 2" >&2; exit 2; }
case "$FS" in ext2|ext4) ;; *) echo "--fs ext2|ext4" >&2; exit 2 ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DISKVEC_LAB_CACHE:-$HOME/.cache/diskvec-lab}
LAB_OUT=${LAB_OUT:-$(mktemp -d /tmp/nvme-lab.XXXXXX)}
mkdir -p "$CACHE" "$LAB_OUT"

need_packages() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  [ -x /bin/busybox ] && /bin/busybox --list | grep -qx mke2fs || missing+=(busybox-static)
  command -v depmod >/dev/null || missing+=(kmod)
  command -v fio >/dev/null || missing+=(fio)
  command -v cpio >/dev/null || missing+=(cpio)
  command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    [ "$(id -u)" = 0 ] || { echo "run as root, or install: ${missing[*]}" >&2; exit 2; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
  fi
}

# The newest 6.1 kernel image package Debian has, unpacked once into the cache.
kernel_dir() {
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$pkg" ] || { echo "apt knows no linux-image-amd64 (apt-get update?)" >&2; exit 2; }
  local dir=$CACHE/$pkg
  if [ ! -d "$dir/lib/modules" ]; then
    (cd "$CACHE" && apt-get download -q "$pkg" >&2)
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    dpkg-deb -x "$CACHE/${pkg}"_*.deb "$dir.tmp"
    rm -f "$CACHE/${pkg}"_*.deb
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# Copies a dynamically linked binary and the libraries it loads into the initramfs.
copy_binary() {
  local bin=$1 root=$2
  install -D -m 755 "$bin" "$root/usr/bin/$(basename "$bin")"
  ldd "$bin" | awk '/=>/{print $3} $1 ~ /^\//{print $1}' | while read -r lib; do
    [ -f "$lib" ] && install -D -m 755 "$lib" "$root$lib"
  done
}

MODULES="configfs nvme nvme-tcp nvmet nvmet-tcp ext4 crc32c_generic"

build_initramfs() {
  local kdir=$1 out=$2
  shift 2
  local ver; ver=$(ls "$kdir/lib/modules")
  local root; root=$(mktemp -d)
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,mnt,lab,lib/modules}
  install -m 755 /bin/busybox "$root/bin/busybox"
  # The modules the lab loads and what they depend on, found by depmod over the whole tree.
  depmod -b "$kdir" "$ver"
  local want=() m
  for m in $MODULES; do
    want+=("$(modprobe -d "$kdir" -S "$ver" --show-depends "$m" 2>/dev/null | awk '/^insmod/{print $2}')")
  done
  printf '%s\n' ${want[@]} | sort -u | while read -r ko; do
    [ -n "$ko" ] && install -D -m 644 "$ko" "$root${ko#"$kdir"}"
  done
  cp "$kdir/lib/modules/$ver"/modules.{builtin,builtin.modinfo,order} "$root/lib/modules/$ver/" 2>/dev/null || true
  depmod -b "$root" "$ver"
  [ -x "$ROOT/target/release/diskvec" ] || (cd "$ROOT" && cargo build --release -q -p diskvec-cli)
  copy_binary "$ROOT/target/release/diskvec" "$root"
  copy_binary "$(command -v fio)" "$root"
  copy_binary "$(command -v mkfs.ext4)" "$root"
  local extra
  for extra in "${EXTRA_BINARIES[@]}"; do copy_binary "$extra" "$root"; done
  install -m 755 "$ROOT/scripts/lab/init.sh" "$root/init"
  install -m 755 "$SCENARIO" "$root/lab/scenario.sh"
  printf '%s\n' "$@" > "$root/lab/args"
  echo "$MODULES" > "$root/lab/modules"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
  rm -rf "$root"
}

need_packages
KDIR=$(kernel_dir)
build_initramfs "$KDIR" "$LAB_OUT/initrd.gz" "$@"

DRIVES=()
KEEP=0
[ -n "$DRIVES_DIR" ] && { mkdir -p "$DRIVES_DIR"; KEEP=1; }
for i in $(seq 1 "$NS"); do
  img=${DRIVES_DIR:-$LAB_OUT}/ns$i.img
  [ -f "$img" ] || truncate -s "${NS_MIB}M" "$img"
  throttle=""
  [ "$IOPS" -gt 0 ] && throttle=",throttling.iops-total=$IOPS"
  DRIVES+=(-drive "file=$img,if=none,id=d$i,format=raw,cache=none,aio=threads$throttle"
           -device "nvme,serial=lab$i,drive=d$i")
done
MP=Y; [ "$MULTIPATH" = off ] && MP=N
echo "lab: $NS namespace(s) over $PORTS port(s), multipath $MULTIPATH, IOPS cap ${IOPS:-0}; console in $LAB_OUT/console.log" >&2
set +e
timeout "$TIMEOUT" qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 2 -m "$MEM_MIB" \
  -kernel "$KDIR"/boot/vmlinuz-* -initrd "$LAB_OUT/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 nvme_core.multipath=$MP lab.ns=$NS lab.ports=$PORTS lab.kato=$KATO lab.fs=$FS lab.keep=$KEEP" \
  -display none -serial stdio -monitor none -no-reboot -nic none "${DRIVES[@]}" \
  < /dev/null > >(tee "$LAB_OUT/console.log") &
QEMU=$!
if [ -n "$POWER_OFF_AFTER" ]; then
  # The scenario's start on the console, then the power cord.
  while kill -0 "$QEMU" 2>/dev/null && ! grep -q '^lab: running the scenario' "$LAB_OUT/console.log" 2>/dev/null; do
    sleep 0.2
  done
  sleep "$POWER_OFF_AFTER"
  pkill -KILL -P "$QEMU" qemu-system-x86 2>/dev/null || true
  kill -KILL "$QEMU" 2>/dev/null || true
fi
wait "$QEMU"; rc=$?
sleep 0.5 # the console's last lines through tee
set -e
if [ -n "$POWER_OFF_AFTER" ] && ! grep -q '^lab: scenario exit' "$LAB_OUT/console.log"; then
  echo "lab: powered off ${POWER_OFF_AFTER}s into the scenario" | tee -a "$LAB_OUT/console.log"
  exit 0
fi
[ "$rc" = 124 ] && { echo "lab: the guest did not finish within ${TIMEOUT}s" >&2; exit 124; }
status=$(sed -n 's/^lab: scenario exit \([0-9]*\).*/\1/p' "$LAB_OUT/console.log" | tail -1)
[ -n "$DRIVES_DIR" ] || rm -f "$LAB_OUT"/ns*.img
[ -n "$status" ] || { echo "lab: the guest stopped before the scenario ended" >&2; exit 1; }
exit "$status"
