#!/usr/bin/env bash
# A short run of every cargo-fuzz target (docs/fuzzing.md): each target
# starts from its committed seed corpus and runs for FUZZ_SMOKE_SECS
# seconds (default 5); a crash fails the script. New inputs go to a scratch
# directory, so the committed corpora never change. Long runs are done by
# hand (docs/fuzzing.md). Not part of .ci/run: building the two fuzz
# workspaces with sanitizers takes longer than the rest of CI; run it after
# changing a decoder or parser.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs="${FUZZ_SMOKE_SECS:-5}"
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
for dir in proto/fuzz engine/fuzz; do
  for target in $(cargo "${toolchain[@]}" fuzz list --fuzz-dir "$dir"); do
    seeds="$dir/corpus/$target"
    if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
      echo "fuzz-smoke: $dir target $target has no committed seed corpus ($seeds)" >&2
      exit 1
    fi
    mkdir -p "$scratch/$target"
    echo "== fuzz $dir $target (${secs}s)"
    log="$scratch/$target.log"
    if ! cargo "${toolchain[@]}" fuzz run --fuzz-dir "$dir" "$target" "$scratch/$target" "$seeds" -- \
      -max_total_time="$secs" -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "fuzz-smoke: $dir target $target failed" >&2
      exit 1
    fi
    grep -E '^Done [0-9]+ runs' "$log" || tail -n 3 "$log"
  done
done
