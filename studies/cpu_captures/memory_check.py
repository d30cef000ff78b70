"""The memory model against the peak of CPU captures of the bundled GPT (measured on this machine).

    python studies/cpu_captures/memory_check.py        # needs torch (the `capture` extra); about 10 s on 2 idle cores

For two sizes (4 layers, hidden 256 and 512, sequence 256) and two micro-batch sizes (2, 8), the
bundled GPT is captured in float32 on the CPU exactly as `lumos capture gpt --profile-memory
--device cpu --dtype float32 --warmup 1 --steps 1` does (one skipped iteration, one warm-up, one
recorded), and `lumos.trace.memory_events.peak_allocated` reads the peak `Total Allocated` of the
CPU in the recorded step.

What that peak holds: on the CPU the profiler counts only what is allocated while it records
(the first `[memory]` event of the step has `Total Allocated` equal to its own `Bytes`, checked
below), so the parameters and the AdamW moments, allocated in the skipped iteration, are not in
it. It falls at the start of the backward (the loss's log-softmax backward), when the forward's
saved activations and the fp32 logits are live and no gradient is yet (`zero_grad(set_to_none=True)`).
So it is compared with the model's activation and logits terms (`lumos.predict.memory`: no
recomputation, fused attention, `activation_bytes=4`), not with its parameter term. Nothing is fitted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

CONFIGS = [(4, 256, 4, 256), (4, 512, 8, 256)]   # layers, hidden, heads, sequence
MICRO_BATCHES = (2, 8)
VOCAB = 1024
MIB = float(1 << 20)


def capture(layers: int, hidden: int, heads: int, seq: int, mbs: int, out: Path) -> Path:
    """One `lumos capture gpt --profile-memory` run on the CPU in float32; the trace's path."""
    from lumos.capture.gpt import GPTConfig, run_gpt

    cfg = GPTConfig(layers=layers, hidden=hidden, ffn=4 * hidden, heads=heads, seq=seq, micro_batch=mbs,
                    vocab=VOCAB)
    return run_gpt(cfg, out_dir=out, steps=1, warmup=1, device="cpu", dtype="float32", log=None,
                   profile_memory=True)


def counts_from_zero(path: Path) -> bool:
    """The step's first CPU [memory] event has Total Allocated == Bytes: the count starts at 0."""
    import gzip

    import orjson

    events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    step = next(e for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#"))
    first = min((e for e in events if e.get("name") == "[memory]" and e["ts"] >= step["ts"]), key=lambda e: e["ts"])
    return first["args"]["Total Allocated"] == first["args"]["Bytes"]


def predicted_mib(layers: int, hidden: int, heads: int, seq: int, mbs: int) -> float:
    """The model's activation + logits terms for this run, float32 activations."""
    from lumos.predict.memory import MemorySettings, stage_memory
    from lumos.model.structure import ModelShape

    shape = ModelShape(hidden=hidden, ffn=4 * hidden, seq=seq, micro_batch=mbs, vocab=VOCAB, heads=heads, tp=1)
    st = MemorySettings(recompute="none", flash_attention=True, activation_bytes=4.0, workspace_gib=0.0)
    parts = stage_memory(shape, layers, 0, 1, 1, 1, st, ndigits=None)
    return (parts["activations_gib"] + parts["logits_gib"]) * 1024.0


def main() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("needs torch: python -m pip install -e '.[capture]'")
        return
    from lumos.capture.gpt import GPTConfig
    from lumos.trace.memory_events import peak_allocated

    start = time.perf_counter()
    print("| layers | hidden | seq | micro-batch | parameters | measured peak MiB | predicted MiB | error % |")
    print("|---|---|---|---|---|---|---|---|")
    for layers, hidden, heads, seq in CONFIGS:
        for mbs in MICRO_BATCHES:
            with tempfile.TemporaryDirectory() as d:
                path = capture(layers, hidden, heads, seq, mbs, Path(d))
                got = peak_allocated(path)["cpu"] / MIB
                if not counts_from_zero(path):
                    print(f"warning: {path}: the CPU count does not start at 0 in the step")
            pred = predicted_mib(layers, hidden, heads, seq, mbs)
            params = GPTConfig(layers=layers, hidden=hidden, ffn=4 * hidden, heads=heads, seq=seq,
                               vocab=VOCAB).parameter_count()
            print(f"| {layers} | {hidden} | {seq} | {mbs} | {params:,} | {got:.1f} | {pred:.1f} | "
                  f"{100 * (pred - got) / got:+.1f} |", flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
