#!/usr/bin/env bash
# A short run of every cargo-fuzz target (docs/fuzzing.md), as .ci/run
# calls it: each fuzz workspace is built once, then every target starts
# from its committed seed corpus and runs for FUZZ_SMOKE_SECS seconds
# (default 5); a crash, or a target without seeds, fails the script. New
# inputs go to a scratch directory, so the committed corpora never change.
# The build is what costs (docs/fuzzing.md, "CI smoke"), so by default it
# is cheap: no sanitizer (the crates forbid `unsafe`; the targets' own
# assertions and Rust's checks remain), unoptimised with debug assertions
# (cargo fuzz --dev; a few seconds need no speed), and one target dir for
# the three workspaces, so proto and engine are compiled once.
# FUZZ_SMOKE_PROFILE=release builds as the long runs do;
# FUZZ_SMOKE_SANITIZER=address adds AddressSanitizer. Long runs are done by
# hand (docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/../.."

secs="${FUZZ_SMOKE_SECS:-5}"
sanitizer="${FUZZ_SMOKE_SANITIZER:-none}"
case "${FUZZ_SMOKE_PROFILE:-dev}" in
  dev) profile=--dev ;;
  release) profile=--release ;;
  *) echo "fuzz-smoke: FUZZ_SMOKE_PROFILE is dev or release" >&2; exit 2 ;;
esac
target_dir="${FUZZ_SMOKE_TARGET_DIR:-$PWD/target/fuzz-smoke}"
build=(-s "$sanitizer" "$profile" --target-dir "$target_dir")
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
# libFuzzer's instrumentation needs unstable rustc flags: the nightly
# toolchain where one is installed, else the stable one told to accept them.
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/bae-fuzz-smoke.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
for dir in proto/fuzz engine/fuzz io-smol/fuzz; do
  echo "== fuzz build $dir (${build[*]})"
  start=$SECONDS
  cargo "${toolchain[@]}" fuzz build --fuzz-dir "$dir" "${build[@]}"
  echo "built $dir in $((SECONDS - start)) s"
  for target in $(cargo "${toolchain[@]}" fuzz list --fuzz-dir "$dir"); do
    seeds="$dir/corpus/$target"
    if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
      echo "fuzz-smoke: $dir target $target has no committed seed corpus ($seeds)" >&2
      exit 1
    fi
    mkdir -p "$scratch/$target"
    echo "== fuzz $dir $target (${secs}s)"
    log="$scratch/$target.log"
    if ! cargo "${toolchain[@]}" fuzz run --fuzz-dir "$dir" "${build[@]}" "$target" \
      "$scratch/$target" "$seeds" -- \
      -max_total_time="$secs" -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "fuzz-smoke: $dir target $target failed" >&2
      exit 1
    fi
    grep -E '^Done [0-9]+ runs' "$log" || tail -n 3 "$log"
  done
done
