#!/usr/bin/env bash
# Fuzz smoke test: builds every cargo-fuzz target and runs each for a short time (default 30 s,
# FUZZ_SECONDS to change) on the checked-in seeds (fuzz/seeds/<target>), the inputs of past
# findings (fuzz/regressions/<target>), and whatever a previous run left in
# fuzz/corpus/<target>. Fails loudly on the first crash, leak, timeout or OOM; the reproducer
# is left in fuzz/artifacts/<target>/.
#
#   bash fuzz/smoke.sh              # every target, 30 s each
#   FUZZ_SECONDS=600 bash fuzz/smoke.sh reader table   # longer runs of some targets
#
# Needs the nightly toolchain and cargo-fuzz; installs them (rustup, `cargo install cargo-fuzz
# --locked`) when missing.
set -euo pipefail
cd "$(dirname "$0")"

SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "== installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal || {
    echo "fuzz/smoke.sh: FAILED to install the nightly toolchain" >&2
    exit 1
  }
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

echo "== cargo +nightly fuzz build (${#targets[@]} targets)"
cargo +nightly fuzz build -O

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${SECONDS_PER_TARGET}s"
  # -rss_limit_mb: hostile sizes must not make paramdex allocate without bound.
  # -timeout: a single input must never take long (no hangs).
  dirs=("corpus/$t" "seeds/$t")
  if [ -d "regressions/$t" ]; then dirs+=("regressions/$t"); fi
  if ! cargo +nightly fuzz run -O "$t" "${dirs[@]}" -- \
      -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 2>"corpus/$t.log"; then
    tail -n 60 "corpus/$t.log" >&2
    echo "fuzz/smoke.sh: FAILURE in target $t (reproducer in fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "corpus/$t.log" | sed "s/^/   /"
done
echo "== fuzz smoke passed: ${targets[*]}"
