#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo-fuzz (libFuzzer, nightly): runs every target of
# crates/fuzz for SECONDS (default 60) each, starting from the seeds crates/fuzz writes
# (valid encodings and committed regression inputs). A crash is left in
# fuzz/artifacts/<target>/; once fixed, copy it into crates/fuzz/regressions/<target>/ so
# the stable loop (`cargo test -p diskvec-fuzz`) replays it.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz (and rustup toolchain install nightly)" >&2
  exit 1
fi
cargo run --release -q -p diskvec-fuzz --bin fuzz-seeds -- fuzz/corpus
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
for t in "${targets[@]}"; do
  echo "== $t: ${seconds}s"
  # -rss_limit_mb: a decoder sized by a lying length field shows up as an out-of-memory crash.
  (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=1024 -max_len=65536 -print_final_stats=1)
done
