"""A plain PyTorch transformer (no Lumos code in it) and its annotated CPU capture, for the tests.

Shared by tests/capture/test_annotate.py and tests/model/test_capture_structure.py.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, HIDDEN, HEADS, FFN, LAYERS = 64, 32, 2, 64, 2
BATCH, SEQ, MICROBATCHES, STEPS = 2, 8, 2, 2


class PlainTransformer(nn.Module):
    """Embedding, `layers` torch.nn.TransformerEncoderLayer in a ModuleList, final norm, Linear head."""

    def __init__(self, layers: int = LAYERS):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0, batch_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(HIDDEN)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, idx):
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def train_step_fn(model, microbatches: int = MICROBATCHES, seed: int = 0):
    """One iteration: `microbatches` forward/backward passes (gradients accumulated), then SGD."""
    gen = torch.Generator().manual_seed(seed)
    data = [torch.randint(VOCAB, (BATCH, SEQ), generator=gen) for _ in range(microbatches)]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        for idx in data:
            logits = model(idx)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten()) / microbatches
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def capture(out_dir, **kwargs):
    """Profile STEPS iterations of a fresh PlainTransformer (annotated unless told); (path, model)."""
    from lumos.capture.profile import profile_steps

    torch.manual_seed(0)
    model = PlainTransformer()
    path = profile_steps(train_step_fn(model), steps=STEPS, warmup=1, out_dir=out_dir, model=model, **kwargs)
    return path, model
