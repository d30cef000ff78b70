"""Annotate any `nn.Module` with the layer ranges `lumos predict` reads, without editing its code.

The predictor changes layer count, width or pipeline depth only when the trace
says where each transformer block, the embedding and the head ran, forward and
backward, per micro-batch (`layer_{L}/forward/mb{i}` and friends; the contract is
`lumos.trace.annotation`). `ModuleAnnotator` writes exactly those
`torch.profiler.record_function` ranges from module hooks:

- forward: a forward pre-hook opens `<name>/forward/mb{i}`, a forward hook
  (`always_call=True`, so a failing forward closes it too) closes it;
- backward: identity autograd markers wrap the module's first floating input
  and output that require grad. The gradient reaching the output opens
  `<name>/backward/mb{i}`, the gradient leaving the input closes it, so the
  range holds every autograd op of the module (on CUDA on the autograd device
  thread, where both markers run). A module whose input needs no gradient (the
  embedding: token ids) closes instead when all its trainable parameters'
  gradients are accumulated.

    backward, one micro-batch (time ->):
      head/backward/mb0   |==|
      layer_1/backward/mb0    |=======|
      layer_0/backward/mb0             |=======|
      embedding/backward/mb0                    |==|
                          ^ grad reaches output  ^ grad leaves input

Which modules (`resolve_blocks`): the blocks are the children of the model's
largest outermost `nn.ModuleList` / `nn.Sequential` whose children all share
one class (outermost, so the experts of an MoE layer or the heads of a
multi-head attention module listed inside every block are never taken for the
blocks), or the container / list of module paths the caller names. The
embedding is the first `nn.Embedding` and the head the last `nn.Linear`
outside the blocks that the model's first forward call reaches (or the paths
named); that first forward only observes them, so their ranges start with the
second forward (the profiler's `wait` iteration, by default unrecorded).

Micro-batch i is the number of forward calls of block 0 earlier in the same
iteration, unless the caller sets it (`set_microbatch`). Forward calls made
inside a backward pass (activation-checkpoint recomputation) write no range and
are not counted.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

from lumos.trace.annotation import EMBEDDING, layer_block, range_name

from . import require_torch

__all__ = ["ModuleAnnotator", "resolve_blocks"]


def _get(model, path: str, what: str):
    """`model.get_submodule(path)`, or a ValueError that names the path and the choices."""
    try:
        return model.get_submodule(path)
    except AttributeError:
        top = ", ".join(n for n, _ in model.named_children()) or "none"
        raise ValueError(f"{what}={path!r}: no such module in {type(model).__name__} "
                         f"(its top-level children: {top})") from None


def _is_container(m) -> bool:
    nn = require_torch().nn
    return isinstance(m, (nn.ModuleList, nn.Sequential))


def resolve_blocks(model, blocks: str | Sequence[str] | None = None) -> tuple[str | list[str], list]:
    """(description, modules) of the transformer blocks of `model`.

    `blocks` None: the children of the largest outermost ModuleList / Sequential
    whose children share one class; a str: the container at that dotted path
    (its children are the blocks); a list of str: those modules, in that order.
    Raises ValueError naming the path that does not resolve, or when no
    container qualifies.
    """
    if isinstance(blocks, str):
        cont = _get(model, blocks, "blocks")
        if not _is_container(cont) or not len(cont):
            raise ValueError(f"blocks={blocks!r} is a {type(cont).__name__}, not a non-empty "
                             "nn.ModuleList / nn.Sequential; name the blocks one by one with a list of paths")
        return blocks, list(cont)
    if blocks is not None:
        paths = list(blocks)
        if not paths:
            raise ValueError("blocks=[] names no module")
        return paths, [_get(model, p, "blocks") for p in paths]
    found: list[tuple[str, Any]] = []
    for path, m in model.named_modules():
        if not _is_container(m) or not len(m):
            continue
        if len({type(c) for c in m}) != 1:
            continue
        if any(path.startswith(f"{p}.") or p == "" for p, _ in found):
            continue     # nested inside an earlier candidate (named_modules is pre-order)
        found.append((path, m))
    if not found:
        raise ValueError(f"{type(model).__name__} has no nn.ModuleList / nn.Sequential whose children "
                         "share one class; name the transformer blocks with blocks='path' or a list of paths")
    path, cont = max(found, key=lambda pc: len(pc[1]))   # max keeps the first of equal sizes
    return path, list(cont)


def _first_grad_tensor(obj):
    """(index, tensor) of the first floating tensor in obj (a tensor or a tuple/list) that requires grad."""
    torch = require_torch()
    items = [obj] if isinstance(obj, torch.Tensor) else (list(obj) if isinstance(obj, (tuple, list)) else [])
    for k, x in enumerate(items):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad:
            return k, x
    return -1, None


def _replace(obj, k: int, x):
    """obj with item k replaced by x (obj itself when it is the tensor)."""
    torch = require_torch()
    if isinstance(obj, torch.Tensor):
        return x
    items = list(obj)
    items[k] = x
    if isinstance(obj, list):
        return items
    if hasattr(obj, "_fields"):      # a namedtuple
        return type(obj)(*items)
    return tuple(items) if type(obj) is tuple else type(obj)(items)


class Range:
    """A record_function range opened and closed from autograd markers or hooks, at most once open.

    `live`, when given, is the owner's set of open ranges, so they can all be closed at once.
    """

    def __init__(self, name: str, live: set | None = None):
        self.name = name
        self.rf = None
        self.live = live

    def open(self) -> None:
        self.close()
        self.rf = require_torch().profiler.record_function(self.name)
        self.rf.__enter__()
        if self.live is not None:
            self.live.add(self)

    def close(self) -> None:
        if self.rf is not None:
            rf, self.rf = self.rf, None
            if self.live is not None:
                self.live.discard(self)
            rf.__exit__(None, None, None)


def markers():
    """(open, close): identity autograd Functions whose backward opens / closes a `Range`.

    Applied to a module's output, the gradient reaching it opens the range; applied to its
    input, the gradient leaving it closes the range. Defined on first use (no torch at import).
    """
    global _MARKERS
    if _MARKERS is None:
        torch = require_torch()

        def marker(action: str):
            class Marker(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, rng):
                    ctx.rng = rng
                    return x.view_as(x)

                @staticmethod
                def backward(ctx, grad):
                    getattr(ctx.rng, action)()
                    return grad, None

            Marker.__name__ = Marker.__qualname__ = f"_{action.capitalize()}InBackward"
            return Marker

        _MARKERS = (marker("open"), marker("close"))
    return _MARKERS


_MARKERS = None


class _Call:
    """One forward call of an annotated module: its forward range and its backward range."""

    __slots__ = ("fwd", "bwd", "marked_in")

    def __init__(self, fwd, bwd, marked_in: bool):
        self.fwd, self.bwd, self.marked_in = fwd, bwd, marked_in


class ModuleAnnotator:
    """Hooks that write `layer_{L}|embedding|head/{forward,backward}/mb{i}` ranges for `model`.

    `attach()` installs them, `detach()` closes every open range and removes
    every hook; `step()` ends an iteration (closes ranges, resets the
    micro-batch count); `set_microbatch(i)` numbers the following forwards i.
    `embedding` / `head`: None finds them in the first forward, False leaves
    them out, a str names the module path.

    >>> ann = ModuleAnnotator(model).attach()        # doctest: +SKIP
    >>> ... train ...; ann.detach(); ann.metadata()  # doctest: +SKIP
    """

    def __init__(self, model, blocks: str | Sequence[str] | None = None,
                 embedding: str | bool | None = None, head: str | bool | None = None):
        torch = require_torch()
        nn = torch.nn
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        self.model = model
        self.blocks_desc, self.blocks = resolve_blocks(model, blocks)
        self.block_class = type(self.blocks[0]).__name__
        inside = set()
        for b in self.blocks:
            inside.update(id(m) for m in b.modules())
        self._outside = [(p, m) for p, m in model.named_modules() if id(m) not in inside]
        self.embedding_path: str | None = None
        self.head_path: str | None = None
        self._discover = {"embedding": embedding is None, "head": head is None}
        self._fixed = {}
        for role, arg in (("embedding", embedding), ("head", head)):
            if isinstance(arg, str):
                self._fixed[role] = (arg, _get(model, arg, role))
            elif arg not in (None, False):
                raise ValueError(f"{role} must be a module path, None (find it) or False (none), not {arg!r}")
        self._handles: list = []
        self._discovery_handles: list = []
        self._seen: list[tuple[str, str]] = []     # (kind, path) of outside modules, in call order
        self._live: set = set()                    # open ranges
        self._calls: dict[int, list[_Call]] = {}   # id(module) -> calls in flight (forward not finished)
        self._param_closers: dict[int, deque] = {}  # id(module) -> ranges waiting for its params' grads
        self._block0_calls = 0
        self._in_pass = False
        self._explicit_mb: int | None = None
        self.attached = False

    # -- public verbs ---------------------------------------------------------------------------
    def attach(self) -> "ModuleAnnotator":
        if self.attached:
            return self
        self.attached = True
        n = len(self.blocks)
        for L, b in enumerate(self.blocks):
            self._annotate(b, layer_block(L), first=L == 0, last=L == n - 1)
        for role, (path, mod) in self._fixed.items():
            self._set_role(role, path, mod)
        if any(self._discover.values()):
            nn = require_torch().nn
            for p, m in self._outside:
                kind = "embedding" if isinstance(m, nn.Embedding) else "linear" if isinstance(m, nn.Linear) else None
                if kind is not None:
                    self._discovery_handles.append(m.register_forward_pre_hook(self._seen_hook(kind, p)))
            self._discovery_handles.append(
                self.model.register_forward_hook(lambda *_: self._finish_discovery(), always_call=True))
        return self

    def step(self) -> None:
        """End of one iteration: find embedding/head if not yet, close open ranges, reset the count."""
        self._finish_discovery()
        self.close_ranges()
        self._block0_calls = 0
        self._in_pass = False
        self._explicit_mb = None

    def set_microbatch(self, i: int) -> None:
        """Number the following forward (and their backward) ranges mb{i}, until `step()`."""
        i = int(i)
        if i < 0:
            raise ValueError(f"micro-batch index must be >= 0, not {i}")
        self._explicit_mb = i

    def close_ranges(self) -> None:
        """Close every open range (a failed forward or backward may leave some open)."""
        for rng in list(self._live):
            rng.close()
        self._calls.clear()
        for q in self._param_closers.values():
            q.clear()

    def detach(self) -> None:
        """Close every open range and remove every hook this annotator installed."""
        try:
            self.close_ranges()
        finally:
            for h in self._handles + self._discovery_handles:
                h.remove()
            self._handles.clear()
            self._discovery_handles.clear()
            self.attached = False

    def metadata(self) -> dict:
        """What was annotated, for the trace's `lumosCapture.annotation`."""
        return {"blocks": self.blocks_desc, "n_blocks": len(self.blocks), "block_class": self.block_class,
                "embedding": self.embedding_path, "head": self.head_path}

    # -- discovery of embedding and head --------------------------------------------------------
    def _seen_hook(self, kind: str, path: str):
        def hook(_mod, _args):
            self._seen.append((kind, path))
        return hook

    def _finish_discovery(self) -> None:
        if not self._discovery_handles:
            return
        for h in self._discovery_handles:
            h.remove()
        self._discovery_handles.clear()
        mods = dict(self._outside)
        if self._discover["embedding"]:
            emb = next((p for k, p in self._seen if k == "embedding"), None)
            if emb is not None:
                self._set_role("embedding", emb, mods[emb])
        if self._discover["head"]:
            head = next((p for k, p in reversed(self._seen) if k == "linear"), None)
            if head is not None:
                self._set_role("head", head, mods[head])
        self._seen.clear()

    def _set_role(self, role: str, path: str, mod) -> None:
        setattr(self, f"{role}_path", path)
        self._annotate(mod, role)

    # -- the hooks ------------------------------------------------------------------------------
    def _mb(self, name: str, first: bool) -> int | None:
        """Micro-batch index of a forward call of `name`; None inside a backward (recomputation)."""
        torch = require_torch()
        if torch._C._current_graph_task_id() != -1:
            return None
        if first:
            self._block0_calls += 1
            self._in_pass = True
        if self._explicit_mb is not None:
            return self._explicit_mb
        if name == EMBEDDING and not self._in_pass:
            return self._block0_calls          # runs before block 0 of the coming pass
        return max(self._block0_calls - 1, 0)

    def _annotate(self, mod, name: str, first: bool = False, last: bool = False) -> None:
        torch = require_torch()
        open_m, close_m = markers()
        key = id(mod)
        params = [p for p in mod.parameters() if p.requires_grad]
        closers = self._param_closers.setdefault(key, deque())

        def pre(_mod, args, kwargs):
            mb = self._mb(name, first)
            if mb is None:
                return None
            fwd = Range(range_name(name, "forward", mb), self._live)
            bwd = Range(range_name(name, "backward", mb), self._live)
            call = _Call(fwd, bwd, False)
            self._calls.setdefault(key, []).append(call)
            fwd.open()
            if not torch.is_grad_enabled():
                return None
            k, x = _first_grad_tensor(args)
            if x is not None:
                call.marked_in = True
                return _replace(args, k, close_m.apply(x, bwd)), kwargs
            for kw, v in kwargs.items():
                k, x = _first_grad_tensor(v)
                if x is not None:
                    call.marked_in = True
                    return args, {**kwargs, kw: _replace(v, k, close_m.apply(x, bwd))}
            return None

        def post(_mod, _args, _kwargs, out):
            calls = self._calls.get(key)
            if not calls:
                return None            # a recomputation inside backward: no range was opened
            call = calls.pop()
            if last:
                self._in_pass = False
            try:
                if out is None or not torch.is_grad_enabled():
                    return None
                k, y = _first_grad_tensor(out)
                if y is None:
                    return None
                if not call.marked_in:
                    if not params:
                        return None    # nothing would close the range: leave backward unannotated
                    y = open_m.apply(y, _OpenThenWait(call.bwd, closers, len(params)))
                else:
                    y = open_m.apply(y, call.bwd)
                return _replace(out, k, y)
            finally:
                call.fwd.close()

        self._handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(mod.register_forward_hook(post, with_kwargs=True, always_call=True))
        for p in params:
            self._handles.append(p.register_post_accumulate_grad_hook(lambda _p: self._param_ready(key)))

    def _param_ready(self, key: int) -> None:
        q = self._param_closers.get(key)
        if not q:
            return
        entry = q[0]
        entry[1] -= 1
        if entry[1] <= 0:
            q.popleft()
            entry[0].close()


class _OpenThenWait:
    """Opens a range and queues it to close when `n` parameter gradients have been accumulated."""

    def __init__(self, rng: Range, queue: deque, n: int):
        self.rng, self.queue, self.n = rng, queue, n

    def open(self) -> None:
        self.rng.open()
        self.queue.append([self.rng, self.n])
