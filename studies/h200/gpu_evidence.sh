#!/usr/bin/env bash
# Record the H200 evidence traces (the measured runs the H200 checks read) and bring them home in pieces.
#
#   bash studies/h200/gpu_evidence.sh DEST [extra gpu_evidence.py flags]
#   bash studies/h200/gpu_evidence.sh /tmp/ev --device cpu --tiny     # the CPU check of the same path
#
# Needs torch (the GPU machine's own) and the project's Python dependencies; where
# a wheel folder .whl/ travels with the tree (orjson, which the GPU image lacks), it
# is installed into /tmp/site first when missing. The traces are recorded under a scratch folder;
# DEST receives summary.json, log.txt and the xz pieces (studies/h200/gpu_evidence.py,
# lumos/capture/evidence.py). Paths are the repository root's: the script cds there first.
#
# RECORD (default: studies/h200/gpu_evidence.py) names another recorder with the same flags and output
# (studies/prereg/prereg_h200.sh sets it to `studies/prereg/prereg_h200.py record`).
set -euo pipefail
cd "$(dirname "$0")/../.."
record="${RECORD:-studies/h200/gpu_evidence.py}"
dest="${1:?usage: gpu_evidence.sh DEST [flags]}"; shift
work="$(mktemp -d /tmp/gpu_evidence.XXXXXX)"
if ! python3 -c "import orjson" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
mkdir -p "$dest"
(command -v nvidia-smi >/dev/null && nvidia-smi) >"$dest/log.txt" 2>&1 || true
python3 $record --out "$work" --pack "$@" 2>&1 \
  | grep -v -E "^USDT:|^STAGE:" | tee -a "$dest/log.txt"
cp "$work/summary.json" "$work"/pack/* "$dest/"
