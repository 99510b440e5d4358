# Lab scenario of the power-loss loop (scripts/lab/power-loss.sh runs it, one boot a round):
# checks the database on the first fabric namespace against the steps acknowledged before
# the last power loss, then writes on from where that left it, printing "ack N" for each
# step acknowledged, until the VM is killed. The workload and the check are the kill -9
# test's (crates/db/tests/kill.rs), run from its test binary (copied in with --with).
# args: ACKED_UNTIL (steps acknowledged before the last power loss; "none" on the first
# boot), FINAL (1: check and stop), [ACK_BEFORE_FLUSH_MS]
ACKED=${1:-none}
FINAL=${2:-0}
BIN=$(ls /usr/bin/kill-* | head -1)
DB=${LAB_PATHS%%,*}/db
TEST=kill_nine_loses_nothing_acknowledged
NEXT=0
if [ "$ACKED" != none ]; then
  DISKVEC_KILL_CHECK="$DB;$ACKED" "$BIN" "$TEST" --exact --nocapture > /tmp/check.txt 2>&1
  grep -E "^power check|panicked|acknowledged points missing" /tmp/check.txt
  NEXT=$(sed -n 's/^power check: next \([0-9]*\).*/\1/p' /tmp/check.txt)
  [ -n "$NEXT" ] || { echo "lab: power check failed"; tail -20 /tmp/check.txt; exit 1; }
fi
[ "$FINAL" = 1 ] && exit 0
echo "lab: writing from step $NEXT on $DB"
# With a third argument MS, a new collection acknowledges before flushing (the lab's check
# of itself: it must report acknowledged writes lost).
[ -n "${3:-}" ] && export DISKVEC_KILL_ACK_BEFORE_FLUSH_MS="$3"
DISKVEC_KILL_CHILD="$DB;$NEXT" "$BIN" "$TEST" --exact --nocapture 2>/dev/null
