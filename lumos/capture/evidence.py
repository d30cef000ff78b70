"""Record the H200 evidence traces (measured on one GPU): the bundled GPT, every configuration twice.

    bash studies/h200/gpu_evidence.sh DEST                           # on the GPU: record, pack, pieces to DEST
    python studies/h200/gpu_evidence.py --out DIR                    # on the GPU (bf16, side stream)
    python studies/h200/gpu_evidence.py --out DIR --device cpu --tiny   # same code path, tiny sizes

One process records every configuration (torch is imported and CUDA initialised
once), first one repetition of each, then the second, so a run cut short by
`--budget-s` still has one trace of every configuration. Writes
DIR/traces/{config}_r{rep}/rank0.json.gz, DIR/summary.json (the exact commands,
GPU, driver, CUDA and torch versions, the wall time of each recording) and, with
`--pack`, DIR/pack/evidence.tar.part-NN: the traces in pieces small enough to
bring home (15 MiB each, xz).

The recorder of `resources/traces/h200/` and, through `record_one` and `pack`, of the pre-registered
check (`lumos.studies.prereg`). It lives in `lumos.capture` because it imports torch (inside its
functions, as every capture module does); the script `studies/h200/gpu_evidence.py` runs `main`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# base: 12 layers, hidden 2048, FFN 8192, 16 heads (head dim 128), seq 2048, micro-batch 4, 2 micro-batches
BASE = dict(layers=12, hidden=2048, ffn=8192, heads=16, seq=2048, micro_batch=4, microbatches=2)
TINY = dict(layers=2, hidden=64, ffn=256, heads=2, seq=32, micro_batch=2, microbatches=2)


def configurations(base: dict) -> dict:
    """Name -> (model sizes, side stream) for the base and every what-if target."""
    def w(scale: float) -> dict:
        return dict(hidden=int(base["hidden"] * scale), ffn=int(base["ffn"] * scale),
                    heads=int(base["heads"] * scale))
    return {
        "base": ({}, True),
        "layers_1.5x": ({"layers": base["layers"] * 3 // 2}, True),
        "layers_2x": ({"layers": base["layers"] * 2}, True),
        "width_1.5x": (w(1.5), True),
        "width_2x": (w(2.0), True),
        "mbs_2": ({"micro_batch": base["micro_batch"] // 2}, True),
        "mbs_8": ({"micro_batch": base["micro_batch"] * 2}, True),
        "mbcount_4": ({"microbatches": base["microbatches"] * 2}, True),
        "no_side_stream": ({}, False),
    }


def command_line(sizes: dict, side: bool, device: str, out: str, steps: int = 3) -> list[str]:
    cmd = ["lumos", "capture", "gpt", "--layers", sizes["layers"], "--hidden", sizes["hidden"],
           "--ffn", sizes["ffn"], "--heads", sizes["heads"], "--seq", sizes["seq"],
           "--micro-batch", sizes["micro_batch"], "--micro-batches", sizes["microbatches"],
           "--vocab", 1024, "--steps", steps, "--warmup", 1, "--device", device, "--out", out]
    if not side:
        cmd.append("--no-side-stream")
    return [str(c) for c in cmd]


def record_one(sizes: dict, side: bool, dest: Path, device: str, seed: int = 0, steps: int = 3) -> dict:
    """Record one configuration of the bundled GPT into dest/rank0.json.gz; its summary row.

    The earlier recordings' models are collected and the peak-memory counter reset first, so
    `max_memory_gib` is this configuration's own peak (the recordings of 2026-11-30 did not
    collect, and their peaks grew from one recording to the next).
    """
    import gc

    import torch

    from lumos.capture.gpt import GPTConfig, run_gpt

    cuda = device.startswith("cuda")
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    cfg = GPTConfig(layers=sizes["layers"], hidden=sizes["hidden"], ffn=sizes["ffn"], heads=sizes["heads"],
                    seq=sizes["seq"], micro_batch=sizes["micro_batch"], vocab=1024)
    start = time.perf_counter()
    path = run_gpt(cfg, out_dir=dest, steps=steps, warmup=1, device=device,
                   dtype="bfloat16" if cuda else "float32", side_stream=side, seed=seed,
                   microbatches=sizes["microbatches"], log=None)
    row = {"sizes": dict(sizes), "side_stream": side,
           "command": " ".join(command_line(sizes, side, device, str(dest), steps)) + f" --seed {seed}",
           "wall_s": round(time.perf_counter() - start, 2), "trace_bytes": path.stat().st_size}
    if cuda:
        row["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return row


def environment(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cudnn"] = torch.backends.cudnn.version()
        try:
            q = "name,driver_version,memory.total,clocks.max.sm,power.limit"
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            env["nvidia_smi"] = f"unavailable: {exc}"
    return env


def pack(out: Path, piece_mib: int = 15, name: str = "evidence", order=None) -> list[str]:
    """The traces, decompressed, and summary.json as one xz-compressed tar, cut into pieces.

    xz over the tar of all traces compresses about 3x better than the per-file
    gzip (the traces repeat each other), which keeps the pieces within what a
    device run may bring back. Unpack with `cat evidence.tar.xz.part-* | xz -d | tar x`
    (`name` replaces `evidence`). `order`: the trace directory names in the order to
    pack them (a truncated pack keeps the first); default every configuration's first
    repetition first.
    """
    import gzip
    import io
    import shutil

    tar = out / f"{name}.tar"
    if order is None:   # every configuration's first repetition first: a truncated pack still holds one of each
        def key(p):
            return (p.parent.name.rsplit("_r", 1)[1], p.parent.name)
    else:
        def key(p):
            return (order.index(p.parent.name) if p.parent.name in order else len(order), p.parent.name)
    with tarfile.open(tar, "w") as tf:
        for gz in sorted((out / "traces").glob("*/rank*.json.gz"), key=key):
            raw = gzip.decompress(gz.read_bytes())
            info = tarfile.TarInfo(f"traces/{gz.parent.name}/{gz.name[:-3]}")
            info.size, info.mtime = len(raw), 0
            tf.addfile(info, io.BytesIO(raw))
        tf.add(out / "summary.json", arcname="summary.json")
    if shutil.which("xz"):
        subprocess.run(["xz", "-T0", "-6", "-f", str(tar)], check=True)
        packed = out / f"{name}.tar.xz"
    else:  # pragma: no cover - xz is on every machine this runs on
        import lzma

        packed = out / f"{name}.tar.xz"
        packed.write_bytes(lzma.compress(tar.read_bytes(), preset=6))
        tar.unlink()
    dest = out / "pack"
    dest.mkdir(exist_ok=True)
    data, names = packed.read_bytes(), []
    step = piece_mib << 20
    for i in range(0, len(data), step):
        piece = dest / f"{name}.tar.xz.part-{i // step:02d}"
        piece.write_bytes(data[i:i + step])
        names.append(f"{piece.name} ({min(step, len(data) - i)} bytes)")
    packed.unlink()
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU check of the same path)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="configurations to record (default all)")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="start no new recording after this many seconds")
    ap.add_argument("--pack", action="store_true")
    args = ap.parse_args(argv)

    out = Path(args.out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    base = TINY if args.tiny else BASE
    confs = configurations(base)
    if args.only:
        confs = {k: v for k, v in confs.items() if k in args.only}
    summary = {"environment": environment(args.device), "base": base, "runs": []}
    t0 = time.perf_counter()
    for rep in range(args.reps):
        for name, (change, side) in confs.items():
            if time.perf_counter() - t0 > args.budget_s:
                summary["runs"].append({"config": name, "rep": rep, "skipped": "budget"})
                continue
            row = {"config": name, "rep": rep,
                   **record_one({**base, **change}, side, out / "traces" / f"{name}_r{rep}", args.device, seed=rep)}
            summary["runs"].append(row)
            print(json.dumps(row), flush=True)
    summary["total_s"] = round(time.perf_counter() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if args.pack:
        print("packed:", pack(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
