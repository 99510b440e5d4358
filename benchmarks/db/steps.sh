# Step helpers of the benchmark scripts (sourced): set OUT, LOG and STEPS first.
# say MSG: a timestamped line to stderr and $LOG.
say() { echo "[$(date +%T)] $*" | tee -a "$LOG" >&2; }
# step LABEL SECONDS CMD...: runs CMD bounded by SECONDS, logs its start, end and exit code,
# and records a failure in $OUT/failures.txt.
step() {
  local label="$1" t="$2"; shift 2
  say "start $label (limit ${t}s): $*"
  local s=$SECONDS
  timeout --kill-after=10 "$t" "$@"
  local rc=$?
  say "end $label rc=$rc in $((SECONDS - s))s"
  [ $rc -eq 0 ] || echo "$label: exit $rc after $((SECONDS - s)) s" >> "$OUT/failures.txt"
}
# has STEP: whether STEP is among $STEPS.
has() { [[ " $STEPS " == *" $1 "* ]]; }
