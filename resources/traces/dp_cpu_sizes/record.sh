#!/usr/bin/env bash
# Record the DDP and FSDP2 CPU traces of this directory (see PROVENANCE.md). Run from the repository root:
#   bash resources/traces/dp_cpu_sizes/record.sh [OUT]     (default OUT: resources/traces/dp_cpu_sizes)
# Three sizes of the bundled GPT; DDP (`--ddp`) at one rank, two and four, FSDP2 FULL_SHARD (`--fsdp full`)
# at one rank and four; gloo, every process pinned to one core (--pin-core: with 2 cores, two ranks share
# each core at four ranks). Rounds r0, r1, r2 (--seed 0, 1, 2) each record all fifteen in turn, so a drift
# of the machine's speed reaches every configuration alike. The machine's load (`uptime`) before and after
# each recording is appended to OUT/LOAD.txt.
set -euo pipefail
out=${1:-resources/traces/dp_cpu_sizes}
mkdir -p "$out"
common=(--seq 32 --micro-batch 2 --micro-batches 2 --vocab 256 --steps 3 --warmup 1 --device cpu --quiet
        --pin-core)
declare -A size=(
  [h64]="--layers 2 --hidden 64 --ffn 256 --heads 2"
  [h32]="--layers 3 --hidden 32 --ffn 128 --heads 2"
  [h128]="--layers 3 --hidden 128 --ffn 512 --heads 4"
)
export OMP_NUM_THREADS=1
record() {   # NAME RANKS FLAGS...: one recording, its load before and after
  local name=$1 ranks=$2
  shift 2
  local before
  before=$(uptime)
  if [ "$ranks" = 1 ]; then
    python -m lumos.cli capture gpt "$@" --out "$out/$name"
  else
    python -m torch.distributed.run --standalone --nproc-per-node "$ranks" -m lumos.capture.gpt "$@" --out "$out/$name"
  fi
  printf '%s\n  before:%s\n  after: %s\n' "$name" "$before" "$(uptime)" >> "$out/LOAD.txt"
}
for rep in 0 1 2; do
  for s in h64 h32 h128; do
    for n in 1 2 4; do
      # shellcheck disable=SC2086
      record "ddp_${s}_${n}rank_r$rep" "$n" ${size[$s]} "${common[@]}" --ddp --seed "$rep"
    done
    for n in 1 4; do
      # shellcheck disable=SC2086
      record "fsdp_${s}_${n}rank_r$rep" "$n" ${size[$s]} "${common[@]}" --fsdp full --seed "$rep"
    done
  done
done
