# Lab scenario (scripts/nvme-lab.sh --ns 2 scripts/lab/path-vanishes.sh): an index mirrored
# over two NVMe/TCP namespaces; three seconds into a search, the second namespace's fabric
# path vanishes (its subsystem leaves the target port: the host's controller loses its
# connection and the kernel holds its I/O while it tries to reconnect). The search must
# answer, from the mirror copies, within the read deadline; then the path comes back.
# args: POINTS (5000), READ_DEADLINE seconds (5; 0: none, the old behaviour), WAIT seconds
# for the answer before the path is given back (120)
N=${1:-5000}
DEADLINE=${2:-5}
WAIT=${3:-120}
set -e
diskvec dataset synth --n "$N" --dim 128 --out /tmp/ds > /dev/null 2>&1
diskvec build --dataset /tmp/ds --index /tmp/idx --metric l2 --paths "$LAB_PATHS" --mirror > /dev/null 2>&1
echo "lab: built $N x 128 over $LAB_PATHS ($LAB_DEVICES), mirrored"
set +e
( sleep 3; lab_drop_ns 2 ) &
start=$(date +%s)
diskvec search --index /tmp/idx --dataset /tmp/ds --k 10 --search-list 50 --threads 1 \
  --read-deadline "$DEADLINE" --json > /tmp/search.json 2> /tmp/search.err &
pid=$!
# The answer, not the process's exit: reads given up on stay with the kernel until the path
# returns, and a process leaving with io_uring reads in flight waits for them.
while ! grep -q '"timeouts"' /tmp/search.json && [ $(( $(date +%s) - start )) -lt "$WAIT" ]; do
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if grep -q '"timeouts"' /tmp/search.json; then
  echo "lab: search answered after $(( $(date +%s) - start )) s"
else
  echo "lab: no answer after $(( $(date +%s) - start )) s"
fi
cat /tmp/search.json
grep -v '^ *[a-z +]*\[' /tmp/search.err | tail -5
lab_restore_ns 2
wait "$pid"; rc=$?
echo "lab: search exited $rc after $(( $(date +%s) - start )) s"
# Answered from the copies: the vanished path's reads were given up on, recall stayed.
grep '"timeouts"' /tmp/search.json | grep -q '"timeouts":[1-9]' && [ "$rc" = 0 ]
