"""`lumos capture`: record a trace Lumos can replay (needs the `capture` extra, i.e. torch).

    lumos capture gpt --layers 2 --hidden 64 --ffn 256 --heads 2 --seq 32 \\
        --micro-batch 2 --steps 3 --out DIR

runs `lumos.capture.gpt` (same flags as `python -m lumos.capture.gpt`) and
writes DIR/rank{R}.json.gz; `lumos capture llama` trains the Llama-style model of `lumos.capture.llama`
(grouped-query attention, SwiGLU, RMSNorm, RoPE), `lumos capture moe` the mixture-of-experts model of
`lumos.capture.moe` (top-k router, SwiGLU experts, expert parallelism over gloo: `--ep N` starts N ranks).
Registering the subcommand imports no torch; a
missing torch is reported as a one-line error when the command runs.
"""

from __future__ import annotations

import argparse

from lumos.errors import UserError

from .flags import non_negative_int, output_path, positive_int, retype


def register(subparsers) -> None:
    from lumos.capture.gpt import add_arguments  # torch-free at import time

    p = subparsers.add_parser(
        "capture", help="record a PyTorch profiler trace Lumos can use (needs torch)",
        description=__doc__.splitlines()[0])
    which = p.add_subparsers(dest="capture_command", required=True, metavar="WORKLOAD")
    g = which.add_parser("gpt", help="train a small self-contained GPT under the profiler",
                         description="Train a small GPT under the profiler; write OUT/rank{R}.json.gz.")
    add_arguments(g)
    retype(g, {**dict.fromkeys(("layers", "hidden", "ffn", "heads", "seq", "micro_batch", "micro_batches", "vocab",
                                "steps"), positive_int),
               **dict.fromkeys(("warmup", "rank", "seed"), non_negative_int), "out": output_path})
    g.set_defaults(func=run)
    from lumos.capture.llama import add_arguments as llama_arguments   # torch-free at import time

    ll = which.add_parser("llama", help="train a small Llama-style model (GQA, SwiGLU, RMSNorm, RoPE) under the profiler",
                          description="Train a small Llama-style model under the profiler; write OUT/rank0.json.gz.")
    llama_arguments(ll)
    retype(ll, {**dict.fromkeys(("layers", "hidden", "ffn", "heads", "kv_heads", "seq", "micro_batch",
                                 "micro_batches", "vocab", "steps"), positive_int),
                **dict.fromkeys(("warmup", "seed"), non_negative_int), "out": output_path})
    ll.set_defaults(func=run)
    from lumos.capture.moe import add_arguments as moe_arguments   # torch-free at import time

    mo = which.add_parser("moe", help="train a small mixture-of-experts model (top-k router, SwiGLU experts, "
                                      "expert parallelism over gloo) under the profiler",
                          description="Train a small MoE model under the profiler on --ep ranks; write "
                                      "OUT/rank{R}.json.gz per rank.")
    moe_arguments(mo)
    retype(mo, {**dict.fromkeys(("layers", "hidden", "heads", "kv_heads", "experts", "top_k", "expert_ffn", "seq",
                                 "micro_batch", "micro_batches", "vocab", "ep", "steps", "threads"), positive_int),
                **dict.fromkeys(("warmup", "seed", "shared_expert_ffn"), non_negative_int), "out": output_path})
    mo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lumos.capture import CaptureUnavailable, INSTALL_HINT, require_torch

    try:
        require_torch()
    except CaptureUnavailable:
        raise UserError(INSTALL_HINT) from None
    if args.capture_command == "llama":
        from lumos.capture.llama import run_from_args
    elif args.capture_command == "moe":
        from lumos.capture.moe import run_from_args
    else:
        from lumos.capture.gpt import run_from_args

    try:
        run_from_args(args)
    except CaptureUnavailable:
        raise UserError(INSTALL_HINT) from None
    except ValueError as exc:  # bad sizes, --device cuda without a CUDA device
        raise UserError(str(exc)) from exc
    return 0
