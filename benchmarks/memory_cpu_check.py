"""The memory model's activation term against CPU captures of the bundled GPT (measured on this machine).

    python benchmarks/memory_cpu_check.py        # needs torch (the `capture` extra); about 10 s

For two sizes (4 layers, hidden 256 and 512, sequence 256) and two micro-batch sizes (2, 8), one
training iteration of `lumos.capture.gpt`'s model in float32 on the CPU runs under
`torch.profiler` with `profile_memory=True`. On the CPU the profiler's `Total Allocated`
counts from the start of profiling (it starts at 0 and ends at 0), so its peak is what the
iteration itself allocates: activations, logits, gradients and optimizer temporaries, not the
parameters and optimizer state allocated before. It is compared with the memory model's
activation and logits terms (`lumos.transform.memory`, no recomputation, fused attention) with
activations at 4 bytes: the model's formula counts 2-byte (16-bit) activations, so the float32
prediction is twice its activation term. The parameter term (bytes per parameter x parameters)
is arithmetic and not checked here. A check, not a calibration: nothing is fitted.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [(4, 256, 4, 256), (4, 512, 8, 256)]   # layers, hidden, heads, sequence
MICRO_BATCHES = (2, 8)
VOCAB = 1024
MIB = float(1 << 20)


def measured_peak_mib(layers: int, hidden: int, heads: int, seq: int, mbs: int) -> tuple[float, int]:
    import torch

    from lumos.capture.gpt import GPTConfig, build_model

    cfg = GPTConfig(layers=layers, hidden=hidden, ffn=4 * hidden, heads=heads, seq=seq, micro_batch=mbs,
                    vocab=VOCAB)
    torch.manual_seed(0)
    model = build_model(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx, tgt = torch.randint(VOCAB, (mbs, seq)), torch.randint(VOCAB, (mbs, seq))

    def step() -> None:
        loss = model(idx, tgt, mb=0)
        loss.backward()
        model.close_ranges()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    step()   # optimizer state exists before the profiled iteration
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events
              if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {})]
    return max(totals) / MIB, sum(p.numel() for p in model.parameters())


def predicted_mib(layers: int, hidden: int, heads: int, seq: int, mbs: int) -> float:
    from lumos.transform.memory import MemorySettings, plan_memory
    from lumos.transform.structure import ModelShape

    shape = ModelShape(hidden=hidden, ffn=4 * hidden, seq=seq, micro_batch=mbs, vocab=VOCAB, heads=heads, tp=1)
    st = MemorySettings.from_profile(None, recompute="none", flash_attention=True, workspace_gib=0.0)
    stage = plan_memory(shape, [layers], 1, 1, 1, st)["per_stage"][0]
    return (2.0 * stage["activations_gib"] + stage["logits_gib"]) * 1024.0


def main() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("needs torch: python -m pip install -e '.[capture]'")
        return
    print("| layers | hidden | seq | micro-batch | parameters | measured peak MiB | predicted MiB | error % |")
    print("|---|---|---|---|---|---|---|---|")
    for layers, hidden, heads, seq in CONFIGS:
        for mbs in MICRO_BATCHES:
            got, params = measured_peak_mib(layers, hidden, heads, seq, mbs)
            pred = predicted_mib(layers, hidden, heads, seq, mbs)
            print(f"| {layers} | {hidden} | {seq} | {mbs} | {params:,} | {got:.1f} | {pred:.1f} | "
                  f"{100 * (pred - got) / got:+.1f} |", flush=True)


if __name__ == "__main__":
    main()
