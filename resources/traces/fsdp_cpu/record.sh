#!/usr/bin/env bash
# Record the FSDP2 CPU traces of this directory (see PROVENANCE.md). Run from the repository root:
#   bash resources/traces/fsdp_cpu/record.sh [OUT]     (default OUT: resources/traces/fsdp_cpu)
# Each recording is one `lumos capture gpt --fsdp ...` run, one process or two under torchrun
# (gloo on CPU, one OpenMP thread per process); r0 uses --seed 0, r1 --seed 1.
set -euo pipefail
out=${1:-resources/traces/fsdp_cpu}
model=(--layers 2 --hidden 64 --ffn 256 --heads 2 --seq 32 --micro-batch 2 --micro-batches 2
       --vocab 256 --steps 3 --warmup 1 --device cpu --quiet)
export OMP_NUM_THREADS=1
for rep in 0 1; do
  python -m lumos.cli capture gpt "${model[@]}" --fsdp full --seed "$rep" --out "$out/full_1rank_r$rep"
  for mode in full grad_op; do
    python -m torch.distributed.run --standalone --nproc-per-node 2 -m lumos.capture.gpt \
      "${model[@]}" --fsdp "$mode" --seed "$rep" --out "$out/${mode}_2rank_r$rep"
  done
done
