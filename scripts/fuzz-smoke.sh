#!/bin/sh
# Runs every libFuzzer target in BUILD_DIR for SECS seconds each, from a seed corpus of valid and
# mutated files written by tests/fuzz/seed_<name>.py. Any crash, leak or sanitizer report fails.
set -eu
BUILD_DIR=$1
SECS=${2:-60}
cd "$(dirname "$0")/.."
PY=.venv/bin/python
found=0
for target in "$BUILD_DIR"/fuzz_*; do
    [ -x "$target" ] || continue
    found=1
    name=$(basename "$target" | sed 's/^fuzz_//')
    seeds="$BUILD_DIR/fuzz-seeds/$name"
    corpus="$BUILD_DIR/fuzz-corpus/$name"
    rm -rf "$seeds"
    mkdir -p "$seeds" "$corpus"
    if [ -f "tests/fuzz/seed_$name.py" ]; then
        "$PY" "tests/fuzz/seed_$name.py" "$seeds"
    fi
    echo "fuzz $name: ${SECS}s"
    "$target" -max_total_time="$SECS" -print_final_stats=1 -artifact_prefix="$BUILD_DIR/" \
        "$corpus" "$seeds" 2>"$BUILD_DIR/fuzz-$name.log" || {
        tail -n 60 "$BUILD_DIR/fuzz-$name.log"
        echo "fuzz $name: FAILED (log: $BUILD_DIR/fuzz-$name.log)"
        exit 1
    }
    grep -E "stat::number_of_executed_units|Done " "$BUILD_DIR/fuzz-$name.log" | tail -n 2
done
[ "$found" = 1 ] || { echo "no fuzz targets in $BUILD_DIR"; exit 1; }
