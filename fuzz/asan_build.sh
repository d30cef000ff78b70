#!/usr/bin/env bash
# Build lumos._kernels with AddressSanitizer + UndefinedBehaviorSanitizer, apart from the normal build.
#
#   fuzz/asan_build.sh [OUT_DIR]        (default fuzz/build/asan; the module goes to OUT_DIR/lumos/)
#
# Why by hand: pyproject.toml's `extra-compile-args` put -O3 after CFLAGS, so a pip build with
# sanitizer CFLAGS would still be optimised past what the reports can name. Here the kernels are
# compiled straight from lumos/kernels/*.c with -O1 -g. The module is loaded in place of the
# normal one by fuzz/harness.py when LUMOS_KERNELS_DIR=OUT_DIR (it puts OUT_DIR/lumos first on
# the package's __path__); fuzz/run.sh sets that and the sanitizer environment
# (fuzz/README.md). LUMOS_KERNELS_SRC=DIR builds the .c files of another directory (e.g. an old
# version, to see a finding reproduce).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/fuzz/build/asan}
SRC=${LUMOS_KERNELS_SRC:-$ROOT/lumos/kernels}
CC=${CC:-gcc}
PY=${PYTHON:-python}
INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
mkdir -p "$OUT/lumos"
# -fno-sanitize-recover: the first UBSan report aborts, as an ASan one does, so no report goes unseen.
# float-cast-overflow is not part of -fsanitize=undefined in GCC: named on its own.
"$CC" -shared -fPIC -std=c11 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all \
    -I"$SRC" -I"$INC" "$SRC"/*.c -o "$OUT/lumos/_kernels$SUFFIX" -lm
echo "$OUT/lumos/_kernels$SUFFIX"
