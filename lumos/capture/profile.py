"""Profile steady-state training iterations with the settings Lumos needs.

Two ways in; both write one gzip-compressed Kineto trace per rank,
`<out_dir>/rank{R}.json.gz`, atomically (temporary name, then rename):

    from lumos.capture.profile import profile_steps

    def train_step():
        loss = model(batch).loss
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)

    path = profile_steps(train_step, steps=3, warmup=1, out_dir="traces/run1")

or, for a loop you do not want to wrap in a function:

    from lumos.capture.profile import lumos_profile

    with lumos_profile("traces/run1", steps=3, warmup=1) as cap:
        for _ in range(cap.total_iterations):
            train_step()
            cap.step()              # marks the iteration: ProfilerStep#N
    print(cap.path)

Pass `model=` (any torch.nn.Module) to either and its transformer blocks,
embedding and head write the `layer_{L}/forward/mb{i}` ... ranges
`lumos predict` reads, forward and backward (`lumos.capture.annotate`; on by
default, `annotate=False` turns it off).

Settings, and why Lumos needs each (docs/capture.md has the longer version):

- activities CPU and, when CUDA is available, CUDA: the replay graph needs the
  host ops and runtime calls as well as the kernels they launch.
- `record_shapes=True`: every `cpu_op` carries `Input Dims` / `Input type`, so
  a what-if (hidden, FFN, micro-batch) can re-time GEMMs by shape.
- `with_stack=False` by default: Python stacks bloat the trace and add
  profiler overhead to every op. Lumos reads one thing from them, the module
  calls (`nn.Module: GPT2Block_0`), which name the layers of a model captured
  without annotation (`lumos.model.module_calls`); `with_stack=True` keeps
  them.
- `profile_memory=False` by default: the allocator's `[memory]` instant events
  (one per allocation and free) make traces larger; Lumos reads one thing from
  them, the peak `Total Allocated` per device in the profiled steps, which
  calibrates the memory model's workspace constant (`lumos.predict.memory`).
- `schedule(wait=1, warmup=W, active=N)`: the first iteration (allocator
  growth, cuDNN/cuBLAS autotuning, lazy init) is skipped, W more run with the
  profiler on but discarded, and N steady-state iterations are recorded.
- `_ExperimentalConfig(enable_cuda_sync_events=True)` where the installed
  torch supports it: `cudaStreamWaitEvent` then carries `wait_on_stream` and
  `wait_on_cuda_event_record_corr_id`, the cross-stream happens-before links.
- `prof.step()` after every iteration, so `ProfilerStep#N` ranges delimit the
  iterations in the trace.
- one file per rank, `rank{R}.json.gz`; R is `torch.distributed.get_rank()`
  when a process group is initialized, else the `rank` argument, else 0. When
  torch writes no `distributedInfo` block (no process group), one is added
  (`{"backend": null, "rank": R, "world_size": W}`, W the `world_size`
  argument, else R + 1) so the reader knows the rank of every file.
- `log_clocks` (on when the capture's device is CUDA): the GPU's SM and memory
  clocks, power, temperature and clock-event reasons, read through NVML every
  10 ms during the profiled steps, go into `lumosCapture["clocks"]`
  (`lumos.capture.clocks`): a kernel that ran slower because the GPU clocked
  down (power or thermal limit) is then told from one that did more work.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import require_torch
from .clocks import ClockSampler, unavailable

#: Top-level key under which the capture settings are recorded in each trace.
CAPTURE_METADATA_KEY = "lumosCapture"


def trace_path_for_rank(out_dir: str | os.PathLike, rank: int) -> Path:
    """The file a rank's trace is written to: `<out_dir>/rank{rank}.json.gz`."""
    return Path(out_dir) / f"rank{int(rank)}.json.gz"


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int, bool]:
    """(rank, world_size, distributed): the process group wins, then the arguments."""
    torch = require_torch()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size()), True
    r = 0 if rank is None else int(rank)
    # Without a world size, assume the smallest one this rank fits in.
    ws = int(world_size) if world_size is not None else r + 1
    if r < 0 or ws <= r:
        raise ValueError(f"rank {r} does not fit world_size {ws}")
    return r, ws, False


def experimental_config():
    """`_ExperimentalConfig(enable_cuda_sync_events=True)`, or None where torch lacks it."""
    torch = require_torch()
    cls = getattr(getattr(getattr(torch, "_C", None), "_profiler", None), "_ExperimentalConfig", None)
    if cls is None:
        warnings.warn("this torch has no _ExperimentalConfig; cudaStreamWaitEvent will carry no "
                      "wait_on_stream links and Lumos falls back to inferring them", stacklevel=3)
        return None
    try:
        return cls(enable_cuda_sync_events=True)
    except TypeError:
        warnings.warn("this torch's _ExperimentalConfig has no enable_cuda_sync_events; "
                      "cudaStreamWaitEvent will carry no wait_on_stream links", stacklevel=3)
        return None


def default_activities() -> list:
    """CPU always; CUDA when a CUDA device is available."""
    torch = require_torch()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def _finite(obj):
    """Replace NaN/Infinity (which json accepts but orjson, and the reader, do not) by null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _json_dumps(doc) -> bytes:
    return json.dumps(_finite(doc), separators=(",", ":")).encode("utf-8")


def _finish_trace(raw: bytes, rank: int, world_size: int,
                  metadata: Mapping[str, Any] | None) -> bytes:
    """Add `distributedInfo` (when torch omitted it) and the capture settings."""
    try:
        import orjson

        doc = orjson.loads(raw)
        dumps = orjson.dumps
    except ImportError:  # pragma: no cover - orjson is a core dependency
        doc = json.loads(raw)
        dumps = _json_dumps
    except ValueError:
        # Some torch builds write JSON orjson rejects (NaN, lone surrogates); json is
        # lenient, and _json_dumps writes what orjson (the project's reader) accepts.
        doc = json.loads(raw.decode("utf-8", errors="replace"))
        dumps = _json_dumps
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        doc["distributedInfo"] = {"backend": None, "rank": rank, "world_size": world_size}
    else:
        info.setdefault("rank", rank)
        info.setdefault("world_size", world_size)
    if metadata:
        doc[CAPTURE_METADATA_KEY] = dict(metadata)
    try:
        return dumps(doc)
    except TypeError:  # orjson refuses e.g. non-str keys; json does not
        return _json_dumps(doc)


class LumosCapture:
    """Handle yielded by `lumos_profile`: call `step()` after every iteration.

    Attributes: `profiler` (the torch.profiler.profile), `total_iterations`
    (wait + warmup + steps: how many iterations the loop must run), `rank`,
    `world_size`, and `path` (the written trace; None until the active
    iterations are done).
    """

    def __init__(self, profiler, total_iterations: int, rank: int, world_size: int, target: Path,
                 annotator=None, clocks=None, first_active: int = 0):
        self.profiler = profiler
        self.total_iterations = total_iterations
        self.rank = rank
        self.world_size = world_size
        self.target = target
        self.annotator = annotator     # a ModuleAnnotator, or None (no model, or annotate=False)
        self.clocks = clocks           # a ClockSampler, or None (clocks not logged)
        self.first_active = first_active   # wait + warmup: the first recorded iteration
        self.path: Path | None = None
        self.iterations_done = 0
        if first_active == 0:
            self._clocks_step_begins()

    def step(self) -> None:
        """End of one iteration: close the annotator's ranges, then `profiler.step()`."""
        if self.annotator is not None:
            self.annotator.step()
        self.iterations_done += 1
        last = self.iterations_done == self.total_iterations
        if last and self.clocks is not None:
            self.clocks.stop()   # before profiler.step(): its on_trace_ready writes the block
        self.profiler.step()
        if self.first_active <= self.iterations_done < self.total_iterations:
            self._clocks_step_begins()

    def _clocks_step_begins(self) -> None:
        """A recorded iteration (ProfilerStep#step_num) begins: mark it, sampling from the first."""
        if self.clocks is not None:
            self.clocks.mark(self.profiler.step_num)
            self.clocks.start()

    def microbatch(self, i: int) -> None:
        """Name the following forward / backward ranges `mb{i}` (until `step()`).

        Without it the micro-batch is counted: the number of forward calls of
        block 0 earlier in the iteration. A no-op when nothing is annotated.
        """
        if self.annotator is not None:
            self.annotator.set_microbatch(i)


@contextlib.contextmanager
def lumos_profile(out_dir: str | os.PathLike, *, steps: int = 3, warmup: int = 1, wait: int = 1,
                  rank: int | None = None, world_size: int | None = None,
                  activities: list | None = None,
                  metadata: Mapping[str, Any] | None = None,
                  model=None, annotate: bool = True, blocks: str | Sequence[str] | None = None,
                  embedding: str | bool | None = None,
                  head: str | bool | None = None, with_stack: bool = False,
                  profile_memory: bool = False, device=None,
                  log_clocks: bool | None = None) -> Iterator[LumosCapture]:
    """Profile `steps` steady-state iterations; write `<out_dir>/rank{R}.json.gz`.

    The loop inside must run `cap.total_iterations` (= wait + warmup + steps)
    iterations and call `cap.step()` after each. `metadata` is stored in the
    trace under `lumosCapture` beside the capture settings.

    With `model` (any `torch.nn.Module`) and `annotate=True` (the default) the
    model's transformer blocks, embedding and head write the
    `layer_{L}/forward/mb{i}` ... ranges `lumos predict` reads (see
    `lumos.capture.annotate`); `blocks`, `embedding`, `head` name the modules
    by dotted path instead of finding them (`embedding=False` / `head=False`:
    none). The hooks are removed when the context exits. A wrong path raises
    ValueError before anything runs. `with_stack=True` records Python stacks,
    module calls among them. `profile_memory=True` records the allocator's
    `[memory]` events (`lumos.trace.memory_events` reads their peak).

    `device` is the device the model runs on (default: `model`'s, else the
    current CUDA device when CUDA is profiled, else the CPU). `log_clocks`
    (None: on when that device is CUDA) samples its clocks, power and
    temperature through NVML into `lumosCapture["clocks"]`
    (`lumos.capture.clocks`); when it is off or NVML cannot be used the block
    is `{"source": None, "why": ...}`.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if warmup < 0 or wait < 0:
        raise ValueError("warmup and wait must be >= 0")
    torch = require_torch()
    from lumos.trace.atomic import write_bytes_atomic

    annotator = None
    if model is not None and annotate:
        from .annotate import ModuleAnnotator

        annotator = ModuleAnnotator(model, blocks=blocks, embedding=embedding, head=head)
    r, ws, distributed = _resolve_rank(rank, world_size)
    target = trace_path_for_rank(out_dir, r)
    target.parent.mkdir(parents=True, exist_ok=True)
    acts = list(activities) if activities is not None else default_activities()
    exp = experimental_config()
    settings = {
        "steps": steps, "warmup": warmup, "wait": wait,
        "record_shapes": True, "with_stack": with_stack, "profile_memory": profile_memory,
        "enable_cuda_sync_events": exp is not None,
        "activities": sorted(str(a).rsplit(".", 1)[-1] for a in acts),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "distributed": distributed,
    }
    if metadata:
        settings.update(metadata)
    clocks, clocks_why = _clock_sampler(_capture_device(torch, device, model, acts), log_clocks)
    cap: LumosCapture

    def on_trace_ready(prof) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".export.json", dir=target.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            raw = Path(tmp).read_bytes()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        # write_bytes_atomic gzips for a .gz target, with a fixed mtime.
        meta = dict(settings)
        if annotator is not None:   # embedding and head are known only after the first forward
            meta["annotation"] = annotator.metadata()
        if clocks is not None:
            clocks.stop()           # already stopped by cap.step(), unless the loop ended early
            meta["clocks"] = clocks.metadata()
        else:
            meta["clocks"] = unavailable(clocks_why)
        write_bytes_atomic(target, _finish_trace(raw, r, ws, meta))
        cap.path = target

    kwargs: dict[str, Any] = dict(
        activities=acts,
        schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
        with_stack=with_stack,
        profile_memory=profile_memory,
    )
    if exp is not None:
        kwargs["experimental_config"] = exp
    if annotator is not None:
        annotator.attach()
    if clocks is not None:
        clocks.open()   # NVML's start-up cost lands here, before the profiler, not in a step
    try:
        with torch.profiler.profile(**kwargs) as prof:
            cap = LumosCapture(prof, wait + warmup + steps, r, ws, target, annotator,
                               clocks=clocks, first_active=wait + warmup)
            yield cap
    finally:
        if clocks is not None:
            clocks.stop()
        if annotator is not None:
            annotator.detach()


def _capture_device(torch, device, model, activities):
    """The device the model runs on: `device`, else the model's, else current CUDA if profiled."""
    if device is not None:
        dev = torch.device(device)
    elif model is not None:
        first = next(iter(model.parameters()), None)
        if first is None:
            first = next(iter(model.buffers()), None)
        dev = first.device if first is not None else torch.device("cpu")
    elif torch.cuda.is_available() and torch.profiler.ProfilerActivity.CUDA in activities:
        dev = torch.device("cuda")
    else:
        dev = torch.device("cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _clock_sampler(dev, log_clocks: bool | None):
    """(ClockSampler, None) when clocks are logged, else (None, why not)."""
    if log_clocks is False:
        return None, "off (log_clocks=False)"
    if dev.type != "cuda":
        return None, f"the capture's device is {dev.type}, not a CUDA GPU"
    return ClockSampler(dev.index), None


def profile_steps(step_fn: Callable[[], Any], steps: int = 3, warmup: int = 1,
                  out_dir: str | os.PathLike = ".", rank: int | None = None, *,
                  wait: int = 1, world_size: int | None = None,
                  activities: list | None = None,
                  metadata: Mapping[str, Any] | None = None,
                  model=None, annotate: bool = True, blocks: str | Sequence[str] | None = None,
                  embedding: str | bool | None = None, head: str | bool | None = None,
                  with_stack: bool = False, profile_memory: bool = False, device=None,
                  log_clocks: bool | None = None) -> Path:
    """Run `step_fn()` wait + warmup + steps times under the profiler; return the trace path.

    `step_fn` is one full training iteration (forward, backward, optimizer
    step) taking no arguments. The first `wait` (default 1) iterations run
    unprofiled, the next `warmup` are profiled and discarded, the last `steps`
    are written to `<out_dir>/rank{R}.json.gz`, each inside a `ProfilerStep#N`
    range. `model`, `annotate`, `blocks`, `embedding`, `head`: as for
    `lumos_profile` (pass `model` to annotate its layers; on by default), as are
    `with_stack`, `profile_memory`, `device` and `log_clocks` (the GPU's clocks,
    on for a CUDA device).

    >>> profile_steps(train_step, steps=2, out_dir="traces/run1", model=model)  # doctest: +SKIP
    """
    with lumos_profile(out_dir, steps=steps, warmup=warmup, wait=wait, rank=rank,
                       world_size=world_size, activities=activities, metadata=metadata,
                       model=model, annotate=annotate, blocks=blocks, embedding=embedding,
                       head=head, with_stack=with_stack, profile_memory=profile_memory,
                       device=device, log_clocks=log_clocks) as cap:
        for _ in range(cap.total_iterations):
            step_fn()
            cap.step()
    if cap.path is None:  # pragma: no cover - the schedule always fires on the last step
        raise RuntimeError("the profiler produced no trace")
    return cap.path
