#!/bin/busybox sh
# The lab guest's /init (scripts/nvme-lab.sh): loads the NVMe target and host drivers,
# exports each qemu NVMe drive as its own NVMe/TCP subsystem on every lab port, connects
# them back through /dev/nvme-fabrics, puts a file system on each fabric namespace (ext2, or
# ext4 with its journal; a kept drive is mounted as it was), runs the scenario and powers off.
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for m in $(cat /lab/modules); do modprobe "$m" || echo "lab: modprobe $m failed"; done
mount -t configfs none /sys/kernel/config
ip link set lo up

arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
NS=$(arg ns); PORTS=$(arg ports); KATO=$(arg kato); FS=$(arg fs); KEEP=$(arg keep)
T=/sys/kernel/config/nvmet
nqn() { echo "nqn.2026-12.dev.diskvec:lab$1"; }

# The qemu drives: the PCIe controllers whose serial is labN.
pcie_device() {
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/transport")" = pcie ] && [ "$(cat "$c/serial" | tr -d ' ')" = "lab$1" ] || continue
    for b in "$c"/nvme*n1; do [ -e "$b" ] && echo "/dev/$(basename "$b")" && return; done
    # With multipath on, the namespace hangs under the subsystem's head node.
    for b in /sys/block/nvme*n1; do
      [ "$(cat "$b/device/serial" 2>/dev/null | tr -d ' ')" = "lab$1" ] && echo "/dev/$(basename "$b")" && return
    done
  done
}
# The fabric block device of subsystem labN (a multipath head, or the one controller's).
fabric_device() {
  # nvmeXcYnZ are the hidden per-path nodes under a multipath head nvmeXnZ.
  for b in /sys/block/nvme*n1; do
    case "$(basename "$b")" in *c*n1) continue ;; esac
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$(nqn "$1")" ] && echo "/dev/$(basename "$b")" && return
  done
}

for p in $(seq 1 "$PORTS"); do
  mkdir "$T/ports/$p"
  echo ipv4 > "$T/ports/$p/addr_adrfam"
  echo tcp > "$T/ports/$p/addr_trtype"
  echo 127.0.0.1 > "$T/ports/$p/addr_traddr"
  echo $((4419 + p)) > "$T/ports/$p/addr_trsvcid"
done
for i in $(seq 1 "$NS"); do
  dev=$(pcie_device "$i")
  [ -n "$dev" ] || { echo "lab: no qemu drive lab$i"; ls /sys/class/nvme; }
  S=$T/subsystems/$(nqn "$i")
  mkdir "$S"
  echo 1 > "$S/attr_allow_any_host"
  echo "lab$i" > "$S/attr_serial"
  mkdir "$S/namespaces/1"
  echo -n "$dev" > "$S/namespaces/1/device_path"
  echo 1 > "$S/namespaces/1/enable"
  for p in $(seq 1 "$PORTS"); do ln -s "$S" "$T/ports/$p/subsystems/$(nqn "$i")"; done
done
# A TCG guest is slow: a keep-alive of 30 s, not 5, so the target does not drop the hosts.
for i in $(seq 1 "$NS"); do
  for p in $(seq 1 "$PORTS"); do
    echo "nqn=$(nqn "$i"),transport=tcp,traddr=127.0.0.1,trsvcid=$((4419 + p)),keep_alive_tmo=$KATO" > /dev/nvme-fabrics \
      || echo "lab: connecting lab$i on port $p failed"
  done
done
sleep 1
LAB_PATHS=""; LAB_DEVICES=""
for i in $(seq 1 "$NS"); do
  dev=$(fabric_device "$i")
  [ -n "$dev" ] || { echo "lab: lab$i did not appear over the fabric"; continue; }
  echo "lab: lab$i is $dev ($(cat /sys/block/$(basename "$dev")/device/transport 2>/dev/null || echo multipath) )"
  mkdir -p "/mnt/p$i"
  # Kept drives (a second boot after a power loss) are mounted as they are: the journal
  # replays what the last boot left.
  if [ "$KEEP" = 1 ] && mount -t "$FS" "$dev" "/mnt/p$i" 2>/dev/null; then
    echo "lab: $dev mounted as left ($FS)"
  else
    case "$FS" in
      ext2) mke2fs -q "$dev" > /dev/null ;;
      *) "mkfs.$FS" -q -F "$dev" > /dev/null ;;
    esac && mount -t "$FS" "$dev" "/mnt/p$i" || echo "lab: no file system on $dev"
  fi
  LAB_PATHS="$LAB_PATHS${LAB_PATHS:+,}/mnt/p$i"
  LAB_DEVICES="$LAB_DEVICES${LAB_DEVICES:+,}$dev"
done
export LAB_PATHS LAB_DEVICES

# Takes target port N away from every subsystem (the hosts' controllers on it lose their
# connection; the kernel holds their I/O and tries to reconnect), and gives it back.
lab_drop_port() { for l in "$T/ports/$1/subsystems/"*; do rm "$l"; done; echo "lab: port $1 dropped"; }
lab_restore_port() {
  for i in $(seq 1 "$NS"); do ln -s "$T/subsystems/$(nqn "$i")" "$T/ports/$1/subsystems/$(nqn "$i")"; done
  echo "lab: port $1 restored"
}
# Takes namespace N's subsystem off every port (that one fabric path vanishes), and back.
lab_drop_ns() { for p in $(seq 1 "$PORTS"); do rm "$T/ports/$p/subsystems/$(nqn "$1")"; done; echo "lab: lab$1 dropped"; }
lab_restore_ns() {
  for p in $(seq 1 "$PORTS"); do ln -s "$T/subsystems/$(nqn "$1")" "$T/ports/$p/subsystems/$(nqn "$1")"; done
  echo "lab: lab$1 restored"
}

echo "lab: running the scenario"
# In a subshell: an `exit` in the scenario ends it, not init (which would panic the guest).
( . /lab/scenario.sh $(cat /lab/args) )
echo "lab: scenario exit $?"
# Not `sync`: a file system on a namespace the scenario took away would hold it until the
# kernel gives up on the path (ctrl_loss_tmo). The drives are scratch; the guest just stops.
echo 1 > /proc/sys/kernel/sysrq
echo b > /proc/sysrq-trigger
