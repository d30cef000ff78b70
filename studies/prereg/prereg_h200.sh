#!/usr/bin/env bash
# Record the pre-registered H200 check's configurations and bring them home in pieces.
#
#   bash studies/prereg/prereg_h200.sh DEST [extra `prereg_h200.py record` flags]
#   bash studies/prereg/prereg_h200.sh /tmp/prereg_cpu --device cpu --tiny     # the CPU check of the same path
#
# Like studies/h200/gpu_evidence.sh: needs torch (the GPU machine's own) and the project's Python
# dependencies, installs a travelling wheel folder .whl/ into /tmp/site where orjson is missing,
# records under a scratch folder, and leaves in DEST summary.json, log.txt and the xz pieces
# prereg.tar.xz.part-NN (unpack: cat DEST/prereg.tar.xz.part-* | xz -d | tar x -C DIR).
# The predictions it checks are the committed benchmarks/prereg/predictions.csv: its sha256 goes
# into summary.json (the CSVs stay under benchmarks/prereg/: their git history is the pre-registration,
# studies/prereg/README.md). Nothing here predicts or scores.
set -euo pipefail
cd "$(dirname "$0")/../.."
RECORD="studies/prereg/prereg_h200.py record" exec bash studies/h200/gpu_evidence.sh "$@"
