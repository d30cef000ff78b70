"""Micro-batches per iteration of a predicted target: the global batch, the paper's TP x PP rule, or the base's.

The Lumos paper (MLSys 2025, Fig. 4 caption) runs 1F1B with "the number of micro-batches equal to
TP x PP": a PP change re-splits the same layers into more stages and fills the deeper pipeline with
more micro-batches, a DP change keeps each replica's work. The emulator follows that protocol
(`model.microbatch_rule: tp_x_pp`), so a prediction from an emulated base must follow it too, or a
2x8x4 target would be predicted with the base's 4 micro-batches and compared with an actual that
ran 16. A base that does not follow it (the H200 traces: 2 micro-batches at TP = PP = 1) was run
with a count of its own choosing, which a what-if keeps unless told otherwise.

Precedence: `global_batch` (m = B / (dp x micro-batch)) > `rule`. Rules:

- ``auto``: ``tp_x_pp`` when the base's own count is its TP x PP, else ``keep``;
- ``tp_x_pp``: m = target TP x target PP;
- ``keep``: the base's count (the global batch grows with DP).
"""

from __future__ import annotations

__all__ = ["MICROBATCH_RULES", "target_micro_batches"]

MICROBATCH_RULES = ("auto", "tp_x_pp", "keep")


def target_micro_batches(base_m: int, base_tp: int, base_pp: int, tp: int, pp: int, dp: int, micro_batch: int,
                        global_batch: int | None = None, rule: str = "auto") -> tuple[int, str]:
    """(micro-batches per iteration, a note saying which rule gave it) for a target of `tp` x `pp` x `dp`.

    Examples
    --------
    >>> target_micro_batches(4, 2, 2, tp=2, pp=8, dp=4, micro_batch=1)[0]
    16
    >>> target_micro_batches(2, 1, 1, tp=1, pp=1, dp=1, micro_batch=4)[0]   # base off the rule: kept
    2
    """
    if rule not in MICROBATCH_RULES:
        raise ValueError(f"micro-batch rule must be one of {', '.join(MICROBATCH_RULES)}, got {rule!r}")
    if global_batch is not None:
        if rule != "auto":
            raise ValueError(f"--global-batch sets the micro-batch count; --microbatch-rule {rule} cannot "
                             f"also set it (give one of them)")
        return _from_global_batch(global_batch, dp, micro_batch)
    follows = base_m == base_tp * base_pp
    if rule == "tp_x_pp" or (rule == "auto" and follows):
        return tp * pp, _tp_x_pp_note(base_m, base_tp, base_pp, tp, pp, forced=rule == "tp_x_pp" and not follows)
    return base_m, _keep_note(base_m, base_tp, base_pp, forced=rule == "keep")


def _from_global_batch(global_batch: int, dp: int, micro_batch: int) -> tuple[int, str]:
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global batch {global_batch} is not a multiple of dp*micro_batch = {dp * micro_batch}")
    m = global_batch // (dp * micro_batch)
    return m, (f"micro-batches per iteration = global batch {global_batch} / (dp {dp} x "
               f"micro-batch {micro_batch}) = {m}")


def _tp_x_pp_note(base_m: int, base_tp: int, base_pp: int, tp: int, pp: int, forced: bool) -> str:
    why = (f"--microbatch-rule tp_x_pp; the base ran {base_m} at TP x PP = {base_tp * base_pp}" if forced
           else f"the paper's protocol; the base ran TP x PP = {base_m}")
    return f"micro-batches per iteration = TP x PP = {tp} x {pp} = {tp * pp} ({why})"


def _keep_note(base_m: int, base_tp: int, base_pp: int, forced: bool) -> str:
    why = ("--microbatch-rule keep" if forced
           else f"the base does not follow the paper's TP x PP rule: it ran {base_m} at TP x PP = "
                f"{base_tp * base_pp}")
    return f"micro-batches per iteration kept at the base's {base_m} ({why}; the global batch grows with dp)"
