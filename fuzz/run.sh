#!/usr/bin/env bash
# Fuzz the compiled kernels under AddressSanitizer + UndefinedBehaviorSanitizer for a bounded time.
#
#   fuzz/run.sh MINUTES [TARGETS] [--plain]
#
# MINUTES: how long (default 5). TARGETS: comma-separated, of trace,arrays,kernels (default all).
# --plain: the installed build instead of the sanitizer one (no rebuild, no LD_PRELOAD).
# Builds the sanitizer module (fuzz/asan_build.sh), then runs `python -m fuzz.run` until the time is
# up. A sanitizer report aborts the process: its report and the input that caused it (DIR/current)
# are kept under DIR/crashes/N/, and fuzzing starts again for the time left. At the end the counts
# of all runs are printed (`python -m fuzz.run --summary DIR`); the exit status is 1 if anything
# was found (a sanitizer report, or a finding of the oracle: DIR/findings/), else 0.
# DIR is fuzz/out/<date-time>; fuzz/README.md says how to replay what it holds.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MINUTES=5
TARGETS=trace,arrays,kernels
PLAIN=0
for arg in "$@"; do
    case "$arg" in
        --plain) PLAIN=1 ;;
        [0-9]*) MINUTES=$arg ;;
        *) TARGETS=$arg ;;
    esac
done
PY=${PYTHON:-python}
OUT=${FUZZ_DIR:-$ROOT/fuzz/out/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
ENVS=()
if [ "$PLAIN" = 0 ]; then
    "$ROOT/fuzz/asan_build.sh" "$ROOT/fuzz/build/asan" >/dev/null || exit 2
    ASAN_LIB=$(${CC:-gcc} -print-file-name=libasan.so)
    # PYTHONMALLOC=malloc: Python's small objects through malloc, where ASan sees them;
    # detect_leaks=0: the interpreter keeps what it allocates until exit; allocator_may_return_null:
    # a huge allocation fails as it would without ASan (a MemoryError), not as an ASan abort.
    ENVS=(LUMOS_KERNELS_DIR="$ROOT/fuzz/build/asan" LD_PRELOAD="$ASAN_LIB" PYTHONMALLOC=malloc
          ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:log_path=$OUT/sanitizer"
          UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$OUT/sanitizer")
fi
END=$((SECONDS + MINUTES * 60))
crashes=0
while (( SECONDS < END - 5 )); do
    left=$((END - SECONDS))
    (cd "$ROOT" && env "${ENVS[@]}" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
        timeout --signal=TERM --kill-after=60 $((left + 120)) \
        "$PY" -m fuzz.run --seconds "$left" --targets "$TARGETS" --out "$OUT" >>"$OUT/log" 2>&1)
    rc=$?
    [ "$rc" = 0 ] && break
    crashes=$((crashes + 1))
    mkdir -p "$OUT/crashes/$crashes"
    cp -rp "$OUT/current/." "$OUT/crashes/$crashes/" 2>/dev/null
    mv "$OUT"/sanitizer.* "$OUT/crashes/$crashes/" 2>/dev/null
    tail -n 60 "$OUT/log" >"$OUT/crashes/$crashes/log-tail"
    echo "run.sh: the fuzz process ended with status $rc: kept in $OUT/crashes/$crashes" >&2
done
(cd "$ROOT" && "$PY" -m fuzz.run --summary "$OUT") | tee "$OUT/summary.json"
if [ "$crashes" -gt 0 ] || ls "$OUT"/findings/*.txt >/dev/null 2>&1; then
    echo "run.sh: found something: see $OUT/crashes and $OUT/findings" >&2
    exit 1
fi
echo "run.sh: nothing found in $MINUTES minutes ($OUT)" >&2
