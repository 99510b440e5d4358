# Lab scenario (scripts/nvme-lab.sh [--ns N] [--iops CAP] scripts/lab/iobench-vs-fio.sh):
# 4 KiB random reads on each fabric block device, diskvec iobench against fio in the same
# guest, at queue depth 1 and 32, one job; then both over all the devices at once. Reads only,
# O_DIRECT, io_uring on both sides. In a TCG guest both are bound by the emulated CPU:
# compare the two within one run, not with the host's numbers. (busybox sh: POSIX only.)
# args: SECONDS per measurement (10)
EACH=${1:-10}
set -e
devices=$(echo "$LAB_DEVICES" | tr , ' ')
fio_rate() { # files (':'-separated) qd -> IOPS
  fio --name=r --filename="$1" --rw=randread --bs=4k --direct=1 --ioengine=io_uring \
    --iodepth="$2" --numjobs=1 --time_based --runtime="$EACH" --size=1g \
    --output-format=json 2>/dev/null \
    | grep -o '"iops" : [0-9.]*' | head -1 | grep -o '[0-9.]*$'
}
iobench_rate() { # paths (','-separated) qd -> IOPS
  diskvec iobench --paths "$1" --qd "$2" --jobs 1 --seconds "$EACH" --json 2>/dev/null \
    | tail -1 | grep -o '"iops":[0-9.]*' | grep -o '[0-9.]*$'
}
row() { printf 'lab: %-16s %4s %12s %12s\n' "$1" "$2" "$3" "$4"; }
echo "lab: 4 KiB random reads, 1 job, $EACH s each; devices $LAB_DEVICES"
row target qd fio_iops iobench_iops
count=0
for dev in $devices; do
  count=$((count + 1))
  for qd in 1 32; do
    row "$dev" "$qd" "$(fio_rate "$dev" "$qd")" "$(iobench_rate "$dev" "$qd")"
  done
done
if [ "$count" -gt 1 ]; then
  for qd in 1 32; do
    row "all $count" "$qd" "$(fio_rate "$(echo "$LAB_DEVICES" | tr , :)" "$qd")" \
      "$(iobench_rate "$LAB_DEVICES" "$qd")"
  done
fi
