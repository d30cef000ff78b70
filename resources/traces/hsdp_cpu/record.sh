#!/usr/bin/env bash
# Record the HSDP CPU trace of this directory (see PROVENANCE.md). Run from the repository root:
#   bash resources/traces/hsdp_cpu/record.sh [OUT]     (default OUT: resources/traces/hsdp_cpu)
# Four processes under torchrun (gloo on CPU, one OpenMP thread each): FSDP2 over a 2 x 2 mesh, sharded
# within pairs of ranks and replicated across the two pairs (--fsdp hsdp), the model of ../fsdp_cpu.
set -euo pipefail
out=${1:-resources/traces/hsdp_cpu}
export OMP_NUM_THREADS=1
python -m torch.distributed.run --standalone --nproc-per-node 4 -m lumos.capture.gpt \
  --layers 2 --hidden 64 --ffn 256 --heads 2 --seq 32 --micro-batch 2 --micro-batches 2 --vocab 256 \
  --steps 3 --warmup 1 --device cpu --quiet --fsdp hsdp --seed 0 --out "$out/hsdp_4rank_r0"
