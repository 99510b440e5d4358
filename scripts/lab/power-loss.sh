#!/bin/bash
# Power loss, for real: the kill -9 test's workload (crates/db/tests/kill.rs: upserts,
# rewrites, deletes, payload updates, seals, each step printed once acknowledged) runs in the
# lab VM on an NVMe/TCP namespace with ext4, and the VM is killed (SIGKILL to qemu) at a
# random moment: the guest's page cache and whatever was in flight are gone, what reached the
# drive stays. The next boot checks the database against every step the host saw
# acknowledged on the console (the step in flight may or may not have landed), then writes on
# until the next power loss. A last boot only checks.
# usage: scripts/lab/power-loss.sh [ROUNDS 5] [MIN_S 4] [MAX_S 20] [ACK_BEFORE_FLUSH_MS]
#   (root; installs as the lab). With ACK_BEFORE_FLUSH_MS the collection acknowledges writes
#   before flushing them (durability "interval"): the loop must then report writes LOST,
#   which a kill -9 loop cannot see (the page cache outlives a process).
set -euo pipefail
ROUNDS=${1:-5}; MIN_S=${2:-4}; MAX_S=${3:-20}; UNSAFE_MS=${4:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
cargo build --release -q -p diskvec-cli
cargo test --release -q -p diskvec-db --test kill --no-run 2>/dev/null
KILL_BIN=$(ls -t target/release/deps/kill-* | grep -v '\.d$' | head -1)
OUT=${LAB_OUT:-$(mktemp -d /tmp/power-loss.XXXXXX)}
DRIVES=$OUT/drives
rm -rf "$DRIVES"
lab() { # round-name power-off-seconds args...
  local name=$1 off=$2; shift 2
  local opts=(--ns 1 --fs ext4 --drives "$DRIVES" --with "$KILL_BIN" --timeout 900)
  [ -n "$off" ] && opts+=(--power-off-after "$off")
  LAB_OUT=$OUT/$name bash scripts/nvme-lab.sh "${opts[@]}" scripts/lab/power-round.sh "$@" > /dev/null 2>&1
}
acked=none
total_acks=0
for r in $(seq 1 "$ROUNDS"); do
  off=$(( MIN_S + RANDOM % (MAX_S - MIN_S + 1) ))
  rc=0
  lab "round$r" "$off" "$acked" 0 $UNSAFE_MS || rc=$?
  # The serial console ends its lines with CR LF.
  log=$OUT/round$r/console.txt
  tr -d '\r' < "$OUT/round$r/console.log" > "$log"
  if grep -q "power check failed\|panicked" "$log"; then
    echo "round $r: LOST acknowledged writes"; grep -E "power check|panicked|missing" "$log"; exit 1
  fi
  [ "$rc" = 0 ] || { echo "round $r: the lab failed ($rc)"; tail -20 "$log"; exit 1; }
  checked=$(sed -n 's/^power check: next \([0-9]*\), \([0-9]*\) points.*/step \1, \2 points/p' "$log" | tail -1)
  from=$(sed -n 's/^lab: writing from step \([0-9]*\).*/\1/p' "$log" | tail -1)
  last=$(sed -n 's/^ack \([0-9]*\)$/\1/p' "$log" | tail -1)
  if [ -z "$from" ]; then
    # The power went during the boot or the check (recovery cut short): nothing was
    # acknowledged; the next boot checks the same steps again.
    grep -q '^lab: running the scenario' "$log" || { echo "round $r: the guest never reached the scenario"; tail -20 "$log"; exit 1; }
    echo "round $r: power off after ${off}s, during the check (${checked:-not finished})"
    continue
  fi
  acks=0; [ -n "$last" ] && acks=$(( last + 1 - from ))
  total_acks=$(( total_acks + acks ))
  acked=$(( from + acks ))
  echo "round $r: checked ${checked:-nothing (first boot)}; wrote from step $from, $acks steps acknowledged, power off after ${off}s"
done
lab final "" "$acked" 1 || { echo "final check: the lab failed"; tail -20 "$OUT/final/console.log"; exit 1; }
final=$OUT/final/console.txt
tr -d '\r' < "$OUT/final/console.log" > "$final"
grep -q '^power check: next' "$final" || { echo "final check: LOST acknowledged writes"; grep -E "power check|panicked|missing" "$final"; exit 1; }
echo "power loss: $ROUNDS rounds, $total_acks steps acknowledged, lost 0 ($(sed -n 's/^power check: \(.*\)/\1/p' "$final" | tail -1)); consoles in $OUT"
