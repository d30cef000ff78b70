"""How much each task's duration moves between occurrences, fitted on the trace alone.

A point replay says what one iteration took; the next one will not take
exactly that. This module fits, from the profiled iterations of a trace, a
duration model that `lumos.analysis.uncertainty` samples to put an interval
around a replay or a prediction. The model (details and what it assumes:
docs/intervals.md):

- Classes. A task's class is its kind and name, plus what the trace says of
  its size: `Input Dims` for CPU ops, the element count for collectives.
  Kernels carry no shape in Kineto, so a kernel's class is its name.
- Groups. Each profiled step of each rank is a group (`FitGroup`): the
  graph of that step. Within a group, a class's occurrences divided by the
  class's median in that group are its ratios (groups where it occurs once say
  nothing and are skipped). A class's pool is its ratios over every group
  (iterations and ranks); a class with fewer than `MIN_OCCURRENCES` ratios
  borrows the pooled spread of its category: the typical well-observed
  class, whose quantile at each of `POOL_QUANTILES` probabilities is the
  median of those classes' quantiles there (robust to a few classes that
  mix shapes under one name).
- Speed factors. All compute kernels of a rank (and, separately, all its CPU
  tasks) share one log-normal speed factor per replay: sigma is the spread,
  across groups, of a group's median log(class median in the group / class
  median over groups). One group (one step of one rank): sigma 0.
- Collectives. A collective's duration holds its transfer and its wait for
  peers. Transfer = the class's 10th percentile in the group; its ratios are
  those of the occurrences at or below the 25th percentile (they waited
  least); wait = occurrence - transfer, drawn as an absolute amount.
- Host gaps. Positive lags of host-side edges (program order, thread
  hand-over, launch latency, sync: the measured time between a task and the
  one it waited for) are classed by edge class and the later task's name and
  drawn like durations. Lags between streams stay as fitted.

Zero spread (every class one value) gives pools of ones, zero waits and
sigma 0, so every sample is the point replay bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos.graph.model import EdgeClass, Graph, TaskKind
from lumos.sim.sampling import DurationModel
from lumos.trace import TraceTable

__all__ = ["MIN_OCCURRENCES", "FitGroup", "Spread", "fit_spread", "task_keys", "lag_keys"]

MIN_OCCURRENCES = 5     # ratios a class needs to keep its own spread (fewer: its category's pooled spread)
POOL_QUANTILES = 100    # probabilities at which the pooled spread is the median of the classes' quantiles
TRANSFER_Q = 0.10       # a collective's transfer part: this quantile of its class in the group
TRANSFER_SPREAD_Q = 0.25  # occurrences at or below this quantile show the transfer's own spread

CATEGORIES = ("compute", "comm", "host", "gap")
WAIT = "comm_wait"
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


def task_keys(graph: Graph, table: TraceTable | None = None) -> np.ndarray:
    """Class key of every task: 'compute|name', 'comm|name|elements', 'host|name|input dims'.
    Without a table (a predicted graph) keys carry the name only."""
    keys = np.empty(graph.n_tasks, dtype=object)
    ev = graph.event
    for i in range(graph.n_tasks):
        name = graph.name[i]
        row = int(ev[i]) if table is not None and ev[i] >= 0 and ev[i] < len(table) else -1
        if graph.kind[i] == TaskKind.GPU:
            if graph.comm[i]:
                size = int(table.in_nelems[row]) if row >= 0 else -1
                keys[i] = f"comm|{name}" + (f"|{size}" if size >= 0 else "")
            else:
                keys[i] = f"compute|{name}"
        else:
            dims = table.input_dims[row] if row >= 0 else None
            keys[i] = f"host|{name}" + (f"|{dims}" if dims else "")
    return keys


def lag_keys(graph: Graph) -> np.ndarray:
    """Class key of every host-side edge with a positive lag ('gap|class|next task'); None for the
    rest (lags on stream-to-stream edges are slack the timing fit gave a GPU queue, not a gap)."""
    keys = np.empty(graph.n_edges, dtype=object)
    for j in np.flatnonzero((graph.lag > 0) & np.isin(graph.cls, HOST_GAP_CLASSES)):
        keys[j] = f"gap|{EdgeClass(int(graph.cls[j])).label}|{graph.name[graph.dst[j]]}"
    return keys


def _by_key(keys: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Values grouped by key (None keys dropped); each group in its original order."""
    keep = np.array([k is not None for k in keys], dtype=bool)
    if not keep.any():
        return {}
    k, v = keys[keep].astype(str), values[keep]
    uniq, inv = np.unique(k, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    return {str(u): v[order[bounds[c]:bounds[c + 1]]] for c, u in enumerate(uniq)}


def _transfer(values: np.ndarray) -> float:
    return float(np.quantile(values, TRANSFER_Q)) if len(values) >= MIN_OCCURRENCES else float(values.min())


@dataclass
class Spread:
    """A fitted duration model, independent of the graph it will be applied to."""
    pools: dict[str, np.ndarray] = field(default_factory=dict)    # class key -> sorted ratios
    waits: dict[str, np.ndarray] = field(default_factory=dict)    # comm class key -> sorted waits (us)
    pooled: dict[str, np.ndarray] = field(default_factory=dict)   # category -> sorted pooled ratios
    by_name: dict[str, str] = field(default_factory=dict)         # 'category|name' -> its best-observed class
    sigma: dict[str, float] = field(default_factory=dict)         # factor category -> std of log speed
    groups: int = 0
    ranks: int = 0
    classes: dict[str, int] = field(default_factory=dict)         # category -> classes seen

    def summary(self) -> dict:
        own = {c: sum(1 for k in self.pools if _category(k) == c) for c in CATEGORIES}
        return {"groups": self.groups, "ranks": self.ranks, "classes": self.classes,
                "classes_with_own_spread": own,
                "rank_speed_sigma": {k: round(v, 6) for k, v in self.sigma.items()}}

    # -- applying the model to a graph ------------------------------------------------------
    def model(self, graph: Graph, keys: np.ndarray | None = None, lags: np.ndarray | None = None,
              own: bool = True, instances: list | None = None) -> DurationModel:
        """The sampling plan of `graph`. `own`: the graph is one of the fitted steps, so a class
        seen `MIN_OCCURRENCES` times in it is centred on its median there (collectives: their
        transfer part, the wait drawn apart); otherwise (a predicted graph) every task is
        centred on its own duration. `instances`: groups of tasks (one collective instance on
        several ranks) that share one transfer draw."""
        keys = task_keys(graph) if keys is None else keys
        lags = lag_keys(graph) if lags is None else lags
        n = graph.n_tasks
        plan = _Plan()
        base = graph.dur.astype(np.float64).copy()
        task_pool = np.full(n, -1, np.int64)
        wait_pool = np.full(n, -1, np.int64)
        centre = self._centres(keys, graph.dur) if own else {}
        for i in range(n):
            key = keys[i]
            if key is None:
                continue
            if key in centre:
                base[i], waits = centre[key]
                if waits:
                    wait_pool[i] = plan.pool(key + "|wait", self.waits[key])
            task_pool[i] = plan.pool(*self._lookup(key, _category(key)))
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
        wait_u = np.full(n, -1, np.int64)
        w = wait_pool >= 0
        wait_u[w] = n_u + np.arange(int(w.sum()))
        n_u += int(w.sum())
        lag_pool = np.full(graph.n_edges, -1, np.int64)
        lag_base = graph.lag.astype(np.float64).copy()
        lag_centre = self._centres(lags, graph.lag) if own else {}
        for j in np.flatnonzero(np.array([k is not None for k in lags], dtype=bool)):
            if lags[j] in lag_centre:
                lag_base[j] = lag_centre[lags[j]][0]
            lag_pool[j] = plan.pool(*self._lookup(lags[j], "gap"))
        lag_u = np.full(graph.n_edges, -1, np.int64)
        le = lag_pool >= 0
        lag_u[le] = n_u + np.arange(int(le.sum()))
        n_u += int(le.sum())
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
        return DurationModel(base=base, task_pool=task_pool, task_u=task_u, wait_pool=wait_pool, wait_u=wait_u,
                             factor=factor, lag_base=lag_base, lag_pool=lag_pool,
                             lag_u=lag_u, pool_ptr=ptr, pool_val=val, factor_sigma=np.array(sigmas, np.float64),
                             n_uniform=n_u)

    def _centres(self, keys: np.ndarray, values: np.ndarray) -> dict[str, tuple[float, bool]]:
        """Per class seen `MIN_OCCURRENCES` times in this graph and fitted with its own spread:
        the value a ratio of 1 gives (its median; a collective's transfer part) and whether a
        wait is drawn apart."""
        out = {}
        for key, members in _by_key(keys, np.arange(len(values))).items():
            if len(members) >= MIN_OCCURRENCES and key in self.pools:
                v = values[members].astype(np.float64)
                out[key] = (_transfer(v), True) if key in self.waits else (float(np.median(v)), False)
        return out

    def _lookup(self, key: str, cat: str) -> tuple[str, np.ndarray]:
        """The pool a key draws from: its own, else its name's best-observed class, else its category's."""
        if key in self.pools:
            return key, self.pools[key]
        alias = self.by_name.get(_name_of(key))
        if alias is not None:
            return alias, self.pools[alias]
        return "pooled|" + cat, self.pooled.get(cat, _ONES)


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
    ratios: dict[str, list[np.ndarray]] = {}
    waits: dict[str, list[np.ndarray]] = {}
    medians: dict[str, dict[int, float]] = {}   # class -> group -> median (speed factors)
    for gi, g in enumerate(groups):
        for key, d in _by_key(g.keys, g.graph.dur.astype(np.float64)).items():
            _add_class(key, d, gi, ratios, waits, medians)
        for key, d in _by_key(g.lag_keys, g.graph.lag.astype(np.float64)).items():
            _add_class(key, d, gi, ratios, waits, medians)
    out = Spread(groups=len(groups), ranks=len({g.rank for g in groups}))
    out.classes = {c: sum(1 for k in medians if _category(k) == c) for c in CATEGORIES}
    best: dict[str, tuple[int, str]] = {}
    for key, parts in ratios.items():
        r = np.concatenate(parts)
        if len(r) < MIN_OCCURRENCES:
            continue
        out.pools[key] = np.sort(r)
        name = _name_of(key)
        if len(r) > best.get(name, (-1, ""))[0]:
            best[name] = (len(r), key)
    out.by_name = {name: key for name, (_, key) in best.items()}
    for key, parts in waits.items():
        w = np.concatenate(parts)
        if key in out.pools and len(w) >= MIN_OCCURRENCES:
            out.waits[key] = np.sort(w)
    probs = (np.arange(POOL_QUANTILES) + 0.5) / POOL_QUANTILES
    for cat in CATEGORIES:
        own = [v for k, v in out.pools.items() if _category(k) == cat]
        if own:  # the typical class: at each probability, the median of the classes' quantiles
            out.pooled[cat] = np.sort(np.median(np.array([np.quantile(v, probs) for v in own]), axis=0))
    out.sigma = {cat: _speed_sigma({k: m for k, m in medians.items() if _category(k) == cat}, len(groups))
                 for cat in FACTOR_CATEGORIES}
    return out


def _add_class(key, d, gi, ratios, waits, medians) -> None:
    cat = _category(key)
    if cat == "comm":
        t = _transfer(d)
        medians.setdefault(key, {})[gi] = t
        if len(d) >= 2 and t > 0:
            low = d[d <= np.quantile(d, TRANSFER_SPREAD_Q)]
            ratios.setdefault(key, []).append(low / t)
            waits.setdefault(key, []).append(np.maximum(d - t, 0.0))
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
