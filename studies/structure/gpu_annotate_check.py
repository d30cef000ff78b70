"""Check `lumos_profile(model=...)` annotation on a GPU (or CPU): any nn.Module, no model edits.

    python studies/structure/gpu_annotate_check.py --out DIR [--device cuda|cpu]

Profiles a plain torch.nn.TransformerEncoderLayer stack (bf16 on CUDA) for 2 steps of 2
micro-batches, then prints, from the trace: the count of every layer/embedding/head range, the
threads the forward and backward ranges lie on, and what `lumos.model.structure` reads from
it (blocks, and the model shape where the trace has GPU kernels). Writes DIR/rank0.json.gz and
DIR/annotate_check.json.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    from torch import nn

    from lumos.capture.profile import profile_steps

    dev = torch.device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    vocab, hidden, heads, ffn, layers, batch, seq, mbs = 1024, 1024, 8, 4096, 4, 4, 512, 2

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0,
                                                                   batch_first=True) for _ in range(layers))
            self.norm = nn.LayerNorm(hidden)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, idx):
            x = self.tok(idx)
            for layer in self.layers:
                x = layer(x)
            return self.out(self.norm(x))

    torch.manual_seed(0)
    model = Plain().to(device=dev, dtype=dtype)
    data = [torch.randint(vocab, (batch, seq), device=dev) for _ in range(mbs)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        for idx in data:
            loss = nn.functional.cross_entropy(model(idx).float().flatten(0, 1), idx.flatten()) / mbs
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = Path(args.out)
    path = profile_steps(step, steps=2, warmup=1, out_dir=out, model=model)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ann = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    names = collections.Counter(e["name"] for e in ann if "/mb" in e["name"])
    tids = collections.defaultdict(set)
    for e in ann:
        if "/mb" in e["name"]:
            tids[e["name"].split("/")[1]].add(e["tid"])
    report = {"device": str(dev), "torch": torch.__version__, "ranges": dict(sorted(names.items())),
              "threads": {k: sorted(map(str, v)) for k, v in tids.items()},
              "annotation": doc.get("lumosCapture", {}).get("annotation")}
    from lumos.graph.run_graph import build_run_graph
    from lumos.trace import load_run
    from lumos.model import structure

    tables = load_run(out)
    graph = build_run_graph(tables)
    try:
        st = structure.find_structure(graph, tables)
        report["structure"] = {"shape": vars(st.shape), "layers": st.layers, "microbatches": st.microbatches}
    except ValueError as exc:
        report["structure"] = {"error": str(exc)}
    blocks = structure._rank_blocks(graph, tables[0], np.flatnonzero(graph.event >= 0), 0,
                                    np.zeros(graph.n_procs, int), np.empty(graph.n_tasks, object), None)
    report["blocks"] = dict(collections.Counter(f"{b.kind}/{b.phase}" for b in blocks))
    (out / "annotate_check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
