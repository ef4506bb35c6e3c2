#!/usr/bin/env bash
# Runs the unit tests of the pure codec modules under Miri (undefined behaviour, out-of-bounds
# and overflow checks on every access): the byte codecs (src/format/), Paddle
# records (record), and the LevelDB table layer (blocks, footer, builder, reader).
# Property tests (proptest, thousands of cases) are skipped: under Miri they would take hours;
# the fuzzers cover that ground.
#
#   bash fuzz/miri.sh
#
# Needs the nightly toolchain with the miri component (`rustup +nightly component add miri`),
# which this script adds when missing. Not part of CI (it takes several minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  rustup +nightly component add miri rust-src
fi
# Isolation stays on: these tests touch no files. Tree Borrows is not needed: the crate's only
# unsafe is the mmap, which these modules do not use.
export MIRIFLAGS="${MIRIFLAGS:-}"
# Skipped as well: two exhaustive loops over hundreds of thousands of layouts (they run in
# `cargo test`, and the code they drive runs under Miri in the other record tests).
time cargo +nightly miri test --lib -- \
  format:: record:: table:: \
  --skip props \
  --skip alignment_round_trips_and_parses_with_prost \
  --skip padding_field_lengths
