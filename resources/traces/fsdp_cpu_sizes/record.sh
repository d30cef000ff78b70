#!/usr/bin/env bash
# Record the FSDP2 CPU traces of this directory (see PROVENANCE.md). Run from the repository root:
#   bash resources/traces/fsdp_cpu_sizes/record.sh [OUT]     (default OUT: resources/traces/fsdp_cpu_sizes)
# Three sizes of the bundled GPT, each at one rank and at two (gloo), FULL_SHARD, every process pinned to
# one core (--pin-core). Rounds r0, r1, r2 (--seed 0, 1, 2) each record all six in turn, so a drift of this
# shared machine's speed reaches every configuration alike.
set -euo pipefail
out=${1:-resources/traces/fsdp_cpu_sizes}
common=(--seq 32 --micro-batch 2 --micro-batches 2 --vocab 256 --steps 3 --warmup 1 --device cpu --quiet
        --fsdp full --pin-core)
declare -A size=(
  [h64]="--layers 2 --hidden 64 --ffn 256 --heads 2"
  [h32]="--layers 3 --hidden 32 --ffn 128 --heads 2"
  [h128]="--layers 3 --hidden 128 --ffn 512 --heads 4"
)
export OMP_NUM_THREADS=1
for rep in 0 1 2; do
  for s in h64 h32 h128; do
    # shellcheck disable=SC2086
    python -m lumos.cli capture gpt ${size[$s]} "${common[@]}" --seed "$rep" --out "$out/${s}_1rank_r$rep"
    # shellcheck disable=SC2086
    python -m torch.distributed.run --standalone --nproc-per-node 2 -m lumos.capture.gpt \
      ${size[$s]} "${common[@]}" --seed "$rep" --out "$out/${s}_2rank_r$rep"
  done
done
