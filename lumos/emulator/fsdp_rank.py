"""FSDP2 on a rank (`RankProgram` mixes it in; training.dp_sharding: fsdp | fsdp_grad_op): every block of layers a
unit, gathered before use and its gradients reduce-scattered, as torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py runs them (docs/emulator.md, "Sharded data parallelism")."""

from __future__ import annotations

from .engine import Thread, AG_STREAM

COMPUTE_S, DP_S = 7, 24   # rank.COMPUTE_S, rank.DP_S


class ShardedDataParallel:
    """Methods of `RankProgram` for FSDP units (they use its threads, launches and collectives)."""

    def _unit(self, blk: tuple) -> str:
        """The FSDP unit (module FQN) of a block of layers."""
        return "layers." + self._span(blk)

    @staticmethod
    def _fsdp(what: str, unit: str) -> str:
        """FSDP2's range name: `FSDP::pre_forward (layers.3)`, the root's without a module."""
        return f"FSDP::{what} ({unit})" if unit else f"FSDP::{what}"

    def _unit_params(self, blk: tuple) -> int:
        return int(self.p.layer_params * blk[1])

    def _all_gather(self, th: Thread, unit: str, params: float):
        """`FSDP::all_gather`: the unit's parameters gathered on the all-gather stream (None at DP 1,
        where FSDP issues no collective)."""
        if self.topo.dp == 1:
            return None
        self.ann_begin(th, self._fsdp("all_gather", unit))
        end = self._comm_op(th, AG_STREAM, self._comm(self.dp_group, "allgather", int(params)),
                            "c10d::_allgather_base_", after_compute=False)
        self.op_end(th)
        return end

    def _unshard(self, th: Thread, unit: str, params: float, hook: str, prefetch: tuple | None = None) -> None:
        """FSDP's pre_forward / pre_backward: gather the unit (unless a prefetch did), prefetch the next
        unit of the backward, and make the compute stream wait for the unit's all-gather. Under
        SHARD_GRAD_OP the backward's unshard and prefetch find the unit still gathered and issue nothing
        (`FSDPParamGroup.unshard` returns early; the hooks' ranges are still recorded)."""
        self.ann_begin(th, self._fsdp(hook, unit))
        gathered = hook == "pre_backward" and not self.reshard_after_forward
        end = self.gathered.pop(unit, None)
        if end is None and not gathered:
            end = self._all_gather(th, unit, params)
        if prefetch is not None:   # a block of layers: (first layer, layers)
            name = self._unit(prefetch)
            self.ann_begin(th, f"FSDP::backward_prefetch for {name}")
            if not gathered:
                self.gathered[name] = self._all_gather(th, name, self._unit_params(prefetch))
            self.op_end(th)
        if end is not None:
            self.wait(th, COMPUTE_S, end)
        self.op_end(th)

    def _reduce_scatter(self, th: Thread, unit: str, params: float) -> None:
        """`FSDP::post_backward_reduce`: the unit's gradients reduce-scattered on the DP stream once its
        backward has produced them; the optimizer waits for every one."""
        if self.topo.dp == 1:
            return
        self.ann_begin(th, self._fsdp("post_backward_reduce", unit))
        self.dp_done.append(self._comm_op(th, DP_S, self._comm(self.dp_group, "reduce_scatter", int(params)),
                                          "c10d::_reduce_scatter_base_"))
        self.op_end(th)
