"""How much each task's duration moves between occurrences, fitted on the trace alone.

A point replay says what one iteration took; the next one will not take
exactly that. This module fits, from the profiled iterations of a trace, a
duration model that `lumos.analysis.uncertainty` samples to put an interval
around a replay or a prediction. The model (details and what it assumes:
docs/intervals.md):

- Classes. A task's class is its kind and name, plus what the trace says of
  its size: `Input Dims` for CPU ops, the element count for collectives.
  Kernels carry no shape in Kineto; a kernel's class adds the name and
  `Input Dims` of the CPU op that launched it (same `External id`), so one
  GEMM kernel name used for four shapes makes four classes.
- Modes. What the trace does not tell apart can still be told by size: a
  class's occurrences (over all groups) are split where their sorted
  log durations jump by more than `BREAK_LOG` (a factor of 2), except between
  two modes that are both small (a scattered tail stays one mode) unless
  the jump is above `BREAK_SMALL_LOG` (a factor of 10) or one group
  holds values of both (two events of one step), and each
  mode is a class of its own. A 4 us gap between ops and a 3 ms Python block
  before the same launch are two modes, not one class whose ratios reach
  750. A task is put in the mode nearest its own duration, so a predicted
  task finds its mode by its predicted size. Collectives are not split:
  their long occurrences are waits (below).
- Groups. Each profiled step of each rank is a group (`FitGroup`): the
  graph of that step. Within a group, a class's occurrences divided by the
  class's median in that group are its ratios (groups where it occurs once say
  nothing and are skipped). A class's pool is its ratios over every group
  (iterations and ranks). A class seen about once per iteration (fewer than
  `MIN_OCCURRENCES` ratios, but in that many groups: a data-loader wait) takes
  its spread across groups instead (its median in each group / the median
  over groups). A class with neither
  borrows the pooled spread of its category: the typical well-observed
  class, whose quantile at each of `POOL_QUANTILES` probabilities is the
  median of those classes' quantiles there (robust to a few classes that
  mix shapes under one name).
- Speed factors. All compute kernels of a rank (and, separately, all its CPU
  tasks) share one log-normal speed factor per replay: sigma is the spread,
  across groups, of a group's median log(class median in the group / class
  median over groups). One group (one step of one rank): sigma 0.
- Collectives. A collective's duration holds its transfer and its wait for
  peers. Transfer = the class's 10th percentile in the group (an occurrence
  shorter than that is all transfer); its ratios are those of the
  occurrences at or below the 25th percentile (they waited least). The wait
  is not drawn: in a replay of one rank the peers' arrival stays where the
  point replay put it (its start + its wait), so a rank that arrives later
  waits less (`lumos.sim.sampling`). The peers are ranks like this one: one
  peer speed factor (the compute sigma) moves their arrival by the compute
  the rank ran before the collective; where the rank was profiled for
  several steps, each sample takes the peers' timing of one of them, drawn
  at random (`peer_times`: when the peers were ready, from the step's start).
- Host gaps. Positive lags of host-side edges (program order, thread
  hand-over, launch latency, sync: the measured time between a task and the
  one it waited for) are classed by edge class and the later task's name and
  drawn like durations. Lags between streams stay as fitted.

Zero spread (every class one value) gives pools of ones, no waits and
sigma 0, so every sample is the point replay bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.sim.sampling import DurationModel
from lumos.trace import TraceTable, schema

__all__ = ["MIN_OCCURRENCES", "FitGroup", "Spread", "fit_spread", "task_keys", "lag_keys", "mode_keys",
           "launching_ops"]

BREAK_LOG = float(np.log(2.0))  # a class splits into modes where sorted log durations jump by more than this
BREAK_SMALL_LOG = float(np.log(10.0))  # ... and two small modes split only where the jump is above this
MIN_OCCURRENCES = 5     # ratios a class needs to keep its own spread (fewer: its category's pooled spread)
POOL_QUANTILES = 100    # probabilities at which the pooled spread is the median of the classes' quantiles
TRANSFER_Q = 0.10       # a collective's transfer part: this quantile of its class in the group
TRANSFER_SPREAD_Q = 0.25  # occurrences at or below this quantile show the transfer's own spread

CATEGORIES = ("compute", "comm", "host", "gap")
FACTOR_CATEGORIES = ("compute", "host")  # what one rank speed factor moves together
HOST_GAP_CLASSES = (EdgeClass.INTRA_THREAD, EdgeClass.INTER_THREAD, EdgeClass.LAUNCH, EdgeClass.SYNC)


@dataclass
class FitGroup:
    """One step of one rank: its graph and each task's and edge's class key (None: not sampled)."""
    graph: Graph
    keys: np.ndarray       # object per task
    lag_keys: np.ndarray   # object per edge
    rank: int = 0


def _category(key: str) -> str:
    return key.split("|", 1)[0]


def _name_of(key: str) -> str:
    """The class key without its size: 'category|name' ('gap|edge class|name' for host gaps)."""
    return "|".join(key.split("|")[:3 if _category(key) == "gap" else 2])


def task_keys(graph: Graph, table: TraceTable | None = None, launching: np.ndarray | None = None) -> np.ndarray:
    """Class key of every task: 'compute|name|launching op|its input dims', 'comm|name|elements',
    'host|name|input dims'. Without a table (a predicted graph) keys carry the name only.
    `launching`: `launching_ops(table)`, where the caller keys several steps of one table."""
    n = graph.n_tasks
    gpu = graph.kind == TaskKind.GPU
    comm = gpu & graph.comm.astype(bool)
    names = np.asarray(graph.name, dtype=object)
    suffix = np.full(n, "", dtype=object)
    if table is not None and len(table):
        ev = np.asarray(graph.event, dtype=np.int64)
        ok = (ev >= 0) & (ev < len(table))
        row = np.where(ok, ev, 0)
        dims = np.where(ok, table.input_dims[row], None)
        host = ok & ~gpu & (dims != None)  # noqa: E711 (elementwise)
        suffix[host] = ["|" + str(d) for d in dims[host]]
        elems = table.in_nelems[row]
        sized = ok & comm & (elems >= 0)
        suffix[sized] = ["|" + str(int(e)) for e in elems[sized]]
        launched = ok & gpu & ~comm
        if launched.any():
            op = (launching_ops(table) if launching is None else launching)[row[launched]]
            at = np.flatnonzero(launched)[op >= 0]
            op = op[op >= 0]
            suffix[at] = [f"|{table.name[r]}|{table.input_dims[r] or ''}" for r in op]
    prefix = np.where(comm, "comm|", np.where(gpu, "compute|", "host|")).astype(object)
    return prefix + names + suffix


def launching_ops(table: TraceTable) -> np.ndarray:
    """Per row, for GPU rows: the row of the innermost CPU op enclosing the runtime call that
    launched it (same correlation id); -1 where there is none. Found by timestamps on the
    call's thread, not by `External id`, which older traces reuse across threads."""
    out = np.full(len(table), -1, np.int64)
    ops = np.flatnonzero(table.cat == schema.CPU_OP)
    calls = np.flatnonzero((table.cat == schema.RUNTIME) & (table.corr >= 0))
    if not len(ops) or not len(calls):
        return out
    rows = np.concatenate([ops, calls])
    is_call = np.concatenate([np.zeros(len(ops), bool), np.ones(len(calls), bool)])
    order = np.lexsort((-table.dur[rows], is_call, table.ts[rows], table.tid[rows], table.pid[rows]))
    parent_of_call = {}
    stack: list[tuple[float, int]] = []
    thread = None
    ts, end, pid, tid = table.ts, table.ts + table.dur, table.pid, table.tid
    for k in order:
        r = int(rows[k])
        here = (int(pid[r]), int(tid[r]))
        if here != thread:
            stack, thread = [], here
        while stack and stack[-1][0] < end[r] and stack[-1][0] <= ts[r]:
            stack.pop()
        if is_call[k]:
            if stack:
                parent_of_call[int(table.corr[r])] = stack[-1][1]
        else:
            stack.append((float(end[r]), r))
    gpu = np.flatnonzero(table.is_gpu() & (table.corr >= 0))
    out[gpu] = [parent_of_call.get(int(c), -1) for c in table.corr[gpu]]
    return out


def lag_keys(graph: Graph) -> np.ndarray:
    """Class key of every host-side edge with a positive lag ('gap|class|next task'); None for the
    rest (lags on stream-to-stream edges are slack the timing fit gave a GPU queue, not a gap)."""
    keys = np.empty(graph.n_edges, dtype=object)
    for j in np.flatnonzero((graph.lag > 0) & np.isin(graph.cls, HOST_GAP_CLASSES)):
        keys[j] = f"gap|{EdgeClass(int(graph.cls[j])).label}|{graph.name[graph.dst[j]]}"
    return keys


def _by_key(keys: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Values grouped by key (None keys dropped), keys in sorted order, each group in its original
    order. Keys are numbered through a dict: sorting the long key strings themselves was most of
    a fit's time."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    index.pop(None, None)
    if not index:
        return {}
    names = sorted(index)
    rank = np.full(len(index) + 1, -1, np.int64)  # code -> position among sorted keys (None's code: -1)
    for pos, name in enumerate(names):
        rank[index[name]] = pos
    r = rank[codes]
    keep = r >= 0
    order = np.flatnonzero(keep)[np.argsort(r[keep], kind="stable")]
    bounds = np.searchsorted(r[order], np.arange(len(names) + 1))
    return {name: values[order[bounds[c]:bounds[c + 1]]] for c, name in enumerate(names)}


def _transfer(values: np.ndarray) -> float:
    return float(np.quantile(values, TRANSFER_Q)) if len(values) >= MIN_OCCURRENCES else float(values.min())


def _transfer_part(values: np.ndarray) -> np.ndarray:
    """Each occurrence's transfer: the class's transfer, or the occurrence itself where shorter."""
    return np.minimum(values, _transfer(values))


_FLOOR_US = 1e-3  # log of a zero duration


def _breaks(values: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """Boundaries between a class's modes: geometric midpoints where its sorted log values jump
    by more than `BREAK_LOG`, except between two modes that both hold fewer than
    `MIN_OCCURRENCES` values unless the jump is above `BREAK_SMALL_LOG` (a factor of 10) or one
    group (`groups`: each value's step of a rank) holds values of both: a scattered tail (one
    data-loader wait per step, 0.5 ms to 4 s) stays one mode and never joins a well-observed
    mode it differs from, while four 15 us gaps and two 16 ms Python blocks before the same call
    are two modes, not one whose ratios run from 0.002 to 2, and so are one step's 8 ms
    forward-step blocks and its 33 ms optimizer block (two events of one step, not one event's
    scatter across steps: merged, the 15B base's interval was 12% wide, its runs 1% apart)."""
    logs = np.log(np.maximum(np.asarray(values, np.float64), _FLOOR_US))
    order = np.argsort(logs, kind="stable")
    lv = logs[order]
    jumps = np.diff(lv)
    cuts = np.flatnonzero(jumps > BREAK_LOG)
    bounds = np.concatenate([[0], cuts + 1, [len(lv)]])
    small = np.diff(bounds) < MIN_OCCURRENCES
    keep = ~(small[:-1] & small[1:]) | (jumps[cuts] > BREAK_SMALL_LOG)
    if groups is not None and len(cuts):
        g = np.asarray(groups)[order]
        for i in np.flatnonzero(~keep):
            left, right = g[bounds[i]:bounds[i + 1]], g[bounds[i + 1]:bounds[i + 2]]
            keep[i] = bool(np.intersect1d(left, right).size)
    cuts = cuts[keep]
    return np.exp((lv[cuts] + lv[cuts + 1]) / 2)


def mode_keys(keys: np.ndarray, values: np.ndarray, breaks: dict[str, np.ndarray]) -> np.ndarray:
    """Each key with its mode ('key#m', m counted from the shortest) where its class has modes;
    None keys stay None."""
    out = keys.copy()
    for key, members in _by_key(keys, np.arange(len(keys))).items():
        b = breaks.get(key)
        if b is not None and len(b):
            m = np.searchsorted(b, np.asarray(values, np.float64)[members])
            out[members] = [f"{key}#{x}" for x in m]
    return out


@dataclass
class Spread:
    """A fitted duration model, independent of the graph it will be applied to."""
    pools: dict[str, np.ndarray] = field(default_factory=dict)    # mode key -> sorted ratios
    pooled: dict[str, np.ndarray] = field(default_factory=dict)   # category -> sorted pooled ratios
    breaks: dict[str, np.ndarray] = field(default_factory=dict)   # class key -> boundaries of its modes (us)
    known: set = field(default_factory=set)                       # every class key seen in the fit
    by_name: dict[str, str] = field(default_factory=dict)         # 'category|name' -> its best-observed class
    sigma: dict[str, float] = field(default_factory=dict)         # factor category -> std of log speed
    groups: int = 0
    ranks: int = 0
    classes: dict[str, int] = field(default_factory=dict)         # category -> classes seen
    peer_times: dict = field(default_factory=dict)  # (rank, comm class) -> step -> peers ready (us from step start)

    def summary(self) -> dict:
        own = {c: sum(1 for k in self.pools if _category(k) == c) for c in CATEGORIES}
        return {"groups": self.groups, "ranks": self.ranks, "classes": self.classes,
                "classes_with_modes": sum(1 for b in self.breaks.values() if len(b)),
                "modes_with_own_spread": own,
                "rank_speed_sigma": {k: round(v, 6) for k, v in self.sigma.items()}}

    # -- applying the model to a graph ------------------------------------------------------
    def model(self, graph: Graph, keys: np.ndarray | None = None, lags: np.ndarray | None = None,
              own: bool = True, instances: list | None = None) -> DurationModel:
        """The sampling plan of `graph`. `own`: the graph is one of the fitted steps, so a mode
        seen `MIN_OCCURRENCES` times in it is centred on its median there (collectives: their
        transfer part, the wait left to the peers' floor); otherwise (a predicted graph) every task is
        centred on its own duration. A task draws from the mode of its class (or of its name's
        best-observed class) nearest its duration. `instances`: groups of tasks (one collective
        instance on several ranks) that share one transfer draw."""
        keys = task_keys(graph) if keys is None else keys
        lags = lag_keys(graph) if lags is None else lags
        n = graph.n_tasks
        plan = _Plan()
        dur = graph.dur.astype(np.float64)
        moded = mode_keys(self._resolve(keys), dur, self.breaks)
        base = dur.copy()
        wait = np.zeros(n)
        task_pool = np.full(n, -1, np.int64)
        centre = self._centres(moded, dur) if own else {}
        for key, members in _by_key(moded, np.arange(n)).items():
            if key in centre:
                at, is_comm = centre[key]
                if is_comm:  # its transfer part; the rest waited for peers
                    base[members] = _transfer_part(dur[members])
                    wait[members] = dur[members] - base[members]
                else:
                    base[members] = at
            task_pool[members] = plan.pool(*self._pool_of(key, _category(key), centred=key in centre))
        peer_slot, peer_delta = self._peer_steps(graph, moded, centre) if own else (np.full(n, -1, np.int64), None)
        task_u = np.full(n, -1, np.int64)
        sampled = task_pool >= 0
        task_u[sampled] = np.arange(int(sampled.sum()))
        for inst in instances or ():
            inst = np.asarray(inst, dtype=np.int64)
            inst = inst[sampled[inst]]
            if len(inst):
                task_u[inst] = task_u[inst[0]]
        uniq, task_u[sampled] = np.unique(task_u[sampled], return_inverse=True)  # shared draws: one number
        n_u = len(uniq)
        lag = graph.lag.astype(np.float64)
        lag_pool = np.full(graph.n_edges, -1, np.int64)
        lag_base = lag.copy()
        lag_moded = mode_keys(self._resolve(lags), lag, self.breaks)
        lag_centre = self._centres(lag_moded, lag) if own else {}
        for key, members in _by_key(lag_moded, np.arange(graph.n_edges)).items():
            if key in lag_centre:
                lag_base[members] = lag_centre[key][0]
            lag_pool[members] = plan.pool(*self._pool_of(key, "gap", centred=key in lag_centre))
        lag_u = np.full(graph.n_edges, -1, np.int64)
        le = lag_pool >= 0
        lag_u[le] = n_u + np.arange(int(le.sum()))
        n_u += int(le.sum())
        peer_u = -1
        if peer_delta is not None:
            peer_u, n_u = n_u, n_u + 1
        factor = np.full(n, -1, np.int64)
        sigmas = []
        gpu = graph.kind == TaskKind.GPU
        for cat, mask in (("compute", gpu & ~graph.comm), ("host", ~gpu)):
            s = self.sigma.get(cat, 0.0)
            if s <= 0:
                continue
            for r in np.unique(graph.rank[mask & sampled]):
                factor[mask & sampled & (graph.rank == r)] = len(sigmas)
                sigmas.append(s)
        ptr, val = plan.arrays()
        model = DurationModel(base=base, task_pool=task_pool, task_u=task_u, factor=factor, lag_base=lag_base,
                              lag_pool=lag_pool, lag_u=lag_u, pool_ptr=ptr, pool_val=val,
                              factor_sigma=np.array(sigmas, np.float64), n_uniform=n_u, wait=wait,
                              peer_slot=peer_slot, peer_delta=peer_delta, peer_u=peer_u)
        if model.has_peers and self.sigma.get("compute", 0.0) > 0:  # the peers: ranks like this one
            model.peer_factor = len(sigmas)
            model.factor_sigma = np.append(model.factor_sigma, self.sigma["compute"])
        return model

    def _peer_steps(self, graph: Graph, moded: np.ndarray, centre: dict) -> tuple[np.ndarray, np.ndarray | None]:
        """When the rank of `graph` (one of its profiled steps) was profiled for several steps:
        per collective a slot, and per step of that rank and slot how much later (us, from the
        step's start) the peers were ready for that collective in that step than in this one.
        A class whose count differs between steps moves only in the steps that agree."""
        n = graph.n_tasks
        slot = np.full(n, -1, np.int64)
        ranks, step = np.unique(graph.rank), graph.summary.get("step")
        if len(ranks) != 1 or step is None:
            return slot, None
        rank = int(ranks[0])
        steps = sorted({s for (r, _), per in self.peer_times.items() if r == rank for s in per})
        if step not in steps or len(steps) < 2:
            return slot, None
        cols, used = [], 0
        for key, members in _by_key(moded, np.arange(n)).items():
            per = self.peer_times.get((rank, key), {})
            mine = per.get(step)
            if key not in centre or not centre[key][1] or mine is None or len(mine) != len(members):
                continue
            members = members[np.argsort(graph.ts[members], kind="stable")]
            slot[members] = used + np.arange(len(members))
            used += len(members)
            cols.append(np.array([per[s] - mine if len(per.get(s, ())) == len(mine) else np.zeros(len(mine))
                                  for s in steps]))
        return (slot, np.concatenate(cols, axis=1)) if cols else (slot, None)

    def _resolve(self, keys: np.ndarray) -> np.ndarray:
        """Each key as a fitted class: itself, else its name's best-observed class, else itself
        (unknown: its category's pooled spread)."""
        out = keys.copy()
        for key, members in _by_key(keys, np.arange(len(keys))).items():
            if key not in self.known:
                out[members] = self.by_name.get(_name_of(key), key)
        return out

    def _centres(self, keys: np.ndarray, values: np.ndarray) -> dict[str, tuple[float, bool]]:
        """Per mode seen `MIN_OCCURRENCES` times in this graph and fitted with its own spread:
        the value a ratio of 1 gives (its median; a collective's transfer part) and whether it is
        a collective (its occurrences above the transfer waited for peers)."""
        out = {}
        for key, members in _by_key(keys, np.arange(len(values))).items():
            if len(members) >= MIN_OCCURRENCES and key in self.pools:
                v = values[members].astype(np.float64)
                comm = _category(key) == "comm"
                out[key] = (_transfer(v) if comm else float(np.median(v)), comm)
        return out

    def _pool_of(self, key: str, cat: str, centred: bool) -> tuple[str, np.ndarray]:
        """The pool a (resolved, moded) key draws from: its own, else its category's. A task not
        centred on its mode's median (its own duration is already one draw, or a prediction)
        draws ratios scaled to mean 1, so that its expected duration is its own: a mode that
        still mixes sizes has ratios of mean above 1 (the median of a skewed mix is low)."""
        name, pool = (key, self.pools[key]) if key in self.pools else ("pooled|" + cat, self.pooled.get(cat, _ONES))
        if centred:
            return name, pool
        mean = float(pool.mean())
        return (name + "|mean 1", pool / mean) if mean > 0 and mean != 1.0 else (name, pool)


_ONES = np.ones(1)


class _Plan:
    """Pools in the order a graph first uses them, flattened to the CSR the sampler reads."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.values: list[np.ndarray] = []

    def pool(self, name: str, values: np.ndarray) -> int:
        at = self.index.get(name)
        if at is None:
            at = self.index[name] = len(self.values)
            self.values.append(values)
        return at

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        sizes = [len(v) for v in self.values]
        ptr = np.zeros(len(sizes) + 1, np.int64)
        ptr[1:] = np.cumsum(sizes)
        val = np.concatenate(self.values) if self.values else np.zeros(0)
        return ptr, val.astype(np.float64)


# -- fitting ----------------------------------------------------------------------------------
def fit_spread(groups: list[FitGroup]) -> Spread:
    """Fit the duration model on the given steps and ranks (see the module docstring)."""
    out = Spread(groups=len(groups), ranks=len({g.rank for g in groups}))
    every: dict[str, list[np.ndarray]] = {}
    of_group: dict[str, list[np.ndarray]] = {}
    for gi, g in enumerate(groups):
        for keys, values in ((g.keys, g.graph.dur), (g.lag_keys, g.graph.lag)):
            for key, d in _by_key(keys, values.astype(np.float64)).items():
                every.setdefault(key, []).append(d)
                of_group.setdefault(key, []).append(np.full(len(d), gi))
    out.known = set(every)
    out.breaks = {k: _breaks(np.concatenate(v), np.concatenate(of_group[k])) for k, v in every.items()
                  if _category(k) != "comm"}
    out.breaks = {k: b for k, b in out.breaks.items() if len(b)}
    best: dict[str, tuple[int, str]] = {}
    for key, parts in every.items():
        count = sum(len(x) for x in parts)
        if count > best.get(_name_of(key), (-1, ""))[0]:
            best[_name_of(key)] = (count, key)
    out.by_name = {name: key for name, (_, key) in best.items()}
    ratios: dict[str, list[np.ndarray]] = {}
    medians: dict[str, dict[int, float]] = {}   # mode -> group -> median (speed factors)
    for gi, g in enumerate(groups):
        for keys, values in ((g.keys, g.graph.dur), (g.lag_keys, g.graph.lag)):
            values = values.astype(np.float64)
            for key, d in _by_key(mode_keys(keys, values, out.breaks), values).items():
                _add_class(key, d, gi, ratios, medians)
    out.classes = {c: sum(1 for k in every if _category(k) == c) for c in CATEGORIES}
    for g in groups:
        _add_peer_times(g, out.peer_times)
    for key, parts in ratios.items():
        r = np.concatenate(parts)
        if len(r) >= MIN_OCCURRENCES:
            out.pools[key] = np.sort(r)
    for key, per_group in medians.items():  # about once per iteration: its spread across iterations
        m = np.array(list(per_group.values()))
        if key not in out.pools and _category(key) != "comm" and len(m) >= MIN_OCCURRENCES and np.median(m) > 0:
            out.pools[key] = np.sort(m / np.median(m))
    probs = (np.arange(POOL_QUANTILES) + 0.5) / POOL_QUANTILES
    for cat in CATEGORIES:
        own = [v for k, v in out.pools.items() if _category(k) == cat]
        if own:  # the typical class: at each probability, the median of the classes' quantiles
            out.pooled[cat] = np.sort(np.median(np.array([np.quantile(v, probs) for v in own]), axis=0))
    out.sigma = {cat: _speed_sigma({k: m for k, m in medians.items() if _category(k) == cat}, len(groups))
                 for cat in FACTOR_CATEGORIES}
    return out


def _add_peer_times(g: FitGroup, peer_times: dict) -> None:
    """When the peers were ready for each collective of one step, in time order, measured from
    the step's start: its end minus its transfer part (as `Spread.model` splits it)."""
    graph = g.graph
    step = graph.summary.get("step")
    if step is None:
        return
    window = graph.summary.get("window_us")
    t0 = float(window[0]) if window else float(graph.ts.min())
    comm = graph.comm & (graph.kind == TaskKind.GPU)
    keys = np.where(comm, g.keys, None)
    for key, members in _by_key(keys, np.arange(graph.n_tasks)).items():
        members = members[np.argsort(graph.ts[members], kind="stable")]
        d = graph.dur[members].astype(np.float64)
        peer_times.setdefault((g.rank, key), {})[step] = graph.ts[members] + d - _transfer_part(d) - t0


def _add_class(key, d, gi, ratios, medians) -> None:
    cat = _category(key)
    if cat == "comm":
        t = _transfer(d)
        medians.setdefault(key, {})[gi] = t
        if len(d) >= 2 and t > 0:
            low = d[d <= np.quantile(d, TRANSFER_SPREAD_Q)]
            ratios.setdefault(key, []).append(low / t)
        return
    m = float(np.median(d))
    medians.setdefault(key, {})[gi] = m
    if len(d) >= 2 and m > 0:
        ratios.setdefault(key, []).append(d / m)


def _speed_sigma(medians: dict[str, dict[int, float]], n_groups: int) -> float:
    """Std (across groups) of each group's median log(class median in the group / class median
    over the groups), over classes seen in at least two groups."""
    if n_groups < 2:
        return 0.0
    shifts: dict[int, list[float]] = {}
    for per_group in medians.values():
        if len(per_group) < 2:
            continue
        m = np.array(list(per_group.values()))
        if np.any(m <= 0):
            continue
        centre = float(np.median(m))
        for g, v in per_group.items():
            shifts.setdefault(g, []).append(float(np.log(v / centre)))
    s = [float(np.median(v)) for v in shifts.values()]
    return float(np.std(s, ddof=1)) if len(s) >= 2 else 0.0
