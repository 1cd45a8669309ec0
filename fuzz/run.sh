#!/usr/bin/env bash
# Short fuzz run: builds the fuzz targets, then runs each for SECONDS (default 20) against its
# committed corpus (and the inputs of fixed crashes in fuzz/regressions/<target>/). New inputs go to a scratch directory, never into fuzz/corpus/; a crash leaves
# its input in fuzz/artifacts/<target>/. Exits non-zero if any target crashed (or failed to build).
#
#   fuzz/run.sh [SECONDS]        CARGO_TARGET_DIR=/some/dir fuzz/run.sh 60
#
# Needs a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz --locked).
set -uo pipefail

seconds="${1:-20}"
case "$seconds" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
targets=(jsonrpc sse_decoder stdio_lines config jwt jwk hop_headers request_state data_layer_cookie glob mirrored duplicates certificate_subject)

if ! cargo +nightly fuzz --version > /dev/null 2>&1; then
    echo "fuzz: needs a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz --locked)" >&2
    exit 2
fi
# cargo-fuzz picks CARGO_TARGET_DIR up itself; default: fuzz/target.
# -O: optimized, no overflow checks (the figures in fuzz/README.md were measured so).
if ! cargo +nightly fuzz build -O; then
    echo "fuzz: build failed" >&2
    exit 1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
    mkdir -p "$scratch/$target"
    log="$scratch/$target.log"
    # The first corpus directory receives new inputs; the committed ones are only read.
    corpora=("fuzz/corpus/$target")
    if [ -d "fuzz/regressions/$target" ]; then
        corpora+=("fuzz/regressions/$target")
    fi
    cargo +nightly fuzz run -O "$target" "$scratch/$target" "${corpora[@]}" -- \
        -max_total_time="$seconds" -timeout=30 -print_final_stats=1 > "$log" 2>&1
    status=$?
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)"
    if [ "$status" -eq 0 ]; then
        printf 'fuzz %-18s ok     %10s executions  %7s exec/s  %s\n' "$target" "${runs:-?}" "${rate:-?}" "$cov"
    else
        printf 'fuzz %-18s FAILED (exit %s) after %s executions\n' "$target" "$status" "${runs:-?}"
        grep -E -A12 "panicked at|ERROR: (libFuzzer|AddressSanitizer)" "$log" | head -30
        grep -E "Test unit written to|failed to build" "$log"
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz: crashed: ${failed[*]}" >&2
    exit 1
fi
