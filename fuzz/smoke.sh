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
#
# It never passes by running nothing: it fails when `cargo fuzz list` fails or lists nothing, when
# that list is not exactly the [[bin]] targets of fuzz/Cargo.toml, when a file in fuzz_targets/ is
# not declared there, when a named target is not declared, and when a target's run executed no
# input.
set -euo pipefail
cd "$(dirname "$0")"

SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"

fail() {
  echo "fuzz/smoke.sh: FAILED: $*" >&2
  exit 1
}

# The names of the [[bin]] sections of fuzz/Cargo.toml, one a line.
declared_targets() {
  awk '
    /^[[:space:]]*\[\[bin\]\][[:space:]]*$/ { in_bin = 1; next }
    /^[[:space:]]*\[/ { in_bin = 0 }
    in_bin && /^[[:space:]]*name[[:space:]]*=/ {
      sub(/^[^"]*"/, ""); sub(/".*$/, ""); print
    }
  ' Cargo.toml
}

mapfile -t declared < <(declared_targets)
[ "${#declared[@]}" -gt 0 ] || fail "fuzz/Cargo.toml declares no [[bin]] target"
for f in fuzz_targets/*.rs; do
  grep -qF "path = \"$f\"" Cargo.toml ||
    fail "$f is not the path of any [[bin]] target in fuzz/Cargo.toml (it would never be fuzzed)"
done

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

# What cargo-fuzz itself sees must be what fuzz/Cargo.toml declares: no more, no fewer. (Read
# through a variable, not `mapfile < <(...)`, whose command's failure would go unnoticed.)
listing="$(cargo +nightly fuzz list)" || fail "\`cargo +nightly fuzz list\` exited with status $?"
[ -n "$listing" ] || fail "\`cargo +nightly fuzz list\` listed no target"
if ! mismatch="$(diff <(printf '%s\n' "${declared[@]}" | sort) <(printf '%s\n' "$listing" | sort))"; then
  fail "\`cargo +nightly fuzz list\` does not list the [[bin]] targets of fuzz/Cargo.toml
('<' declared only, '>' listed only):
$mismatch"
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
  for t in "${targets[@]}"; do
    printf '%s\n' "${declared[@]}" | grep -qxF -- "$t" ||
      fail "no fuzz target named '$t' (declared: ${declared[*]})"
  done
else
  targets=("${declared[@]}")
fi

echo "== cargo +nightly fuzz build (${#targets[@]} targets)"
cargo +nightly fuzz build -O || fail "\`cargo +nightly fuzz build -O\` exited with status $?"

ran=()
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
    fail "target $t (reproducer in fuzz/artifacts/$t/)"
  fi
  { grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "corpus/$t.log" || true; } | sed "s/^/   /"
  units="$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "corpus/$t.log" | tail -n 1)"
  if [ -z "$units" ] || [ "$units" -eq 0 ]; then
    tail -n 60 "corpus/$t.log" >&2
    fail "target $t executed no input (stat::number_of_executed_units is '${units:-missing}' in fuzz/corpus/$t.log)"
  fi
  ran+=("$t")
done
[ "${#ran[@]}" -eq "${#targets[@]}" ] || fail "ran ${#ran[@]} of ${#targets[@]} targets"
echo "== fuzz smoke passed: ${#ran[@]} targets (${ran[*]})"
