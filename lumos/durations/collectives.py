"""Collectives from an alpha-beta model, fitted to the base trace's own collectives.

Assumptions (NCCL ring algorithms, bandwidth-bound):
- all-reduce over n ranks: 2(n-1) steps, each rank moves 2(n-1)/n of the message;
  all-gather / reduce-scatter: n-1 steps, (n-1)/n of the message; send/recv: 1 step, all of it;
  all-to-all: 1 step (every pair exchanges at once), (n-1)/n of the message.
- time = fixed + steps * alpha[level] + moved_bytes / bandwidth, where the level is
  `intra_host` if the group stays inside one host (NVLink) and `inter_host` otherwise.
  Inter-host, beta is the bandwidth of one NIC; NCCL runs one ring channel per NIC
  (multi-rail), so a group with k GPUs on each host spreads its inter-host traffic
  over min(k, nics_per_host) NICs: bandwidth = min(k, nics) * beta, capped by the
  intra-host bandwidth. Point-to-point uses one NIC.
- A measured collective also waits for its slowest peer; the fit uses the fastest
  decile of each (kind, size, group size, level) as the transfer time, and `retime`
  keeps each task's own waiting (measured minus model) unchanged.
- A level without at least two distinct sample sizes takes alpha from the cluster
  profile (config/predict/clusters/h100_roce.yaml) and fits only beta (or takes both from the
  profile when it has no sample at all).
- A level with samples of at least two sizes fits a per-collective constant
  (`level_fixed_us`) and beta; the per-step latency too when its samples span three
  or more step counts (group sizes), else from the profile. With fewer, latency and
  constant cannot be told apart: the emulated 15B base (TP 2 and DP 4 inside a host:
  2 and 6 steps) fitted without a constant gave 24.9 us per step, which a TP 8 target
  (14 steps) turned into 349 us of latency per all-reduce, against about 4 us per step
  in NCCL's published figures.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

LEVELS = ("intra_host", "inter_host")
P2P = ("send", "recv")
BANDWIDTH_BYTES = 1 << 20   # a transfer this large is bandwidth-bound (`fit_alpha_beta`'s rate fallback)


@dataclass(frozen=True)
class CollectiveSpec:
    kind: str            # allreduce | allgather | reduce_scatter | send | recv | broadcast ...
    nbytes: float
    group: tuple         # global ranks of the process group


def steps_and_factor(kind: str, n: int) -> tuple[float, float]:
    if kind in ("send", "recv"):
        return 1.0, 1.0
    if n <= 1:
        return 0.0, 0.0
    if kind == "all_to_all":   # every pair at once (NCCL's grouped sends and receives): one step
        return 1.0, (n - 1) / n
    if kind == "allreduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    return float(n - 1), (n - 1) / n


def level_of(group: tuple, gpus_per_host: int) -> str:
    hosts = {int(r) // gpus_per_host for r in group}
    return "intra_host" if len(hosts) <= 1 else "inter_host"


def rails(group: tuple, gpus_per_host: int, nics_per_host: int) -> int:
    """NICs a group's inter-host traffic spreads over: its GPUs per host, at most the host's NICs."""
    per_host: dict[int, int] = {}
    for r in group:
        per_host[int(r) // gpus_per_host] = per_host.get(int(r) // gpus_per_host, 0) + 1
    return max(1, min(min(per_host.values()), nics_per_host))


DEFAULT_CLUSTER = "h100_roce"


def cluster_names() -> list[str]:
    """The named cluster profiles shipped in config/predict/clusters/ (`lumos predict --cluster NAME`)."""
    from lumos.config import config_dir

    return sorted(p.stem for p in (config_dir() / "predict" / "clusters").glob("*.yaml"))


def cluster_path(name: str | None = None) -> Path:
    """The file of cluster profile `name` (default: DEFAULT_CLUSTER); a ValueError naming the known ones."""
    from lumos.config import config_dir

    name = name or DEFAULT_CLUSTER
    p = config_dir() / "predict" / "clusters" / f"{name}.yaml"
    if not p.is_file():
        raise ValueError(f"no cluster profile {name!r} (known: {', '.join(cluster_names())})")
    return p


def load_profile(path: str | Path | None = None) -> dict:
    """A cluster profile (default: config/predict/clusters/h100_roce.yaml). Plain YAML is read as such
    (omegaconf's import costs a `lumos predict` ~0.1 s); a file with `${...}` interpolations goes through
    omegaconf."""
    p = Path(path) if path else cluster_path()
    text = p.read_text()
    if "${" not in text:
        return _plain_yaml(text)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(p), resolve=True)


# YAML 1.2 floats: PyYAML's safe loader (YAML 1.1) reads `1e3` or `5E-6` (no dot) as strings, as
# omegaconf's loader does not; the profile's numbers must read the same either way
_FLOAT_12 = re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?(?:[eE][-+]?\d+)?|\.\d[\d_]*(?:[eE][-+]?\d+)?"
                       r"|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


def _plain_yaml(text: str) -> dict:
    """The document, a copy of the one parse of this text per process (a prediction reads the profile
    for the collectives, the memory model and the clocks; the caller may change its copy)."""
    return copy.deepcopy(_parsed_yaml(text))


@functools.lru_cache(maxsize=8)
def _parsed_yaml(text: str) -> dict:
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):   # libyaml's parser where PyYAML has it
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
    return yaml.load(text, Loader=Loader) or {}


@dataclass
class AlphaBeta:
    alpha_us: dict            # level -> per-step latency (us)
    beta_bytes_per_us: dict   # level -> bus bandwidth (bytes/us)
    fixed_us: float
    level_fixed_us: dict = field(default_factory=dict)   # level -> constant beyond fixed_us (one-step-count fits)
    fill_us: dict = field(default_factory=dict)   # level -> us per unit of the bytes-moved factor (`sweep` fits)
    gpus_per_host: int = 8
    nics_per_host: int = 8
    source: dict = field(default_factory=dict)   # level -> 'fit' | 'fit beta, profile alpha' | 'profile'
    # send/recv's own model where a benchmark timed them apart (`sweep` fits: NCCL's point-to-point path
    # neither fills up nor runs at the collectives' bus bandwidth); None: the levels above
    p2p: "AlphaBeta | None" = None
    _deltas: dict = field(default_factory=dict, init=False, repr=False, compare=False)   # memo of retime

    def time_us(self, spec: CollectiveSpec) -> float:
        if self.p2p is not None and spec.kind in P2P:
            return self.p2p.time_us(spec)
        n = len(spec.group) if spec.group else 1
        steps, factor = steps_and_factor(spec.kind, n)
        if steps == 0:
            return self.fixed_us
        lv = level_of(spec.group, self.gpus_per_host)
        t = (self.fixed_us + self.level_fixed_us.get(lv, 0.0) + steps * self.alpha_us[lv]
             + factor * spec.nbytes / self.bandwidth(spec, lv))
        return t + factor * self.fill_us[lv] if lv in self.fill_us else t

    def transfer_us(self, spec: CollectiveSpec) -> float:
        """The bandwidth term of `time_us`: how long the bytes take with the links to themselves."""
        if self.p2p is not None and spec.kind in P2P:
            return self.p2p.transfer_us(spec)
        n = len(spec.group) if spec.group else 1
        steps, factor = steps_and_factor(spec.kind, n)
        if steps == 0:
            return 0.0
        return factor * spec.nbytes / self.bandwidth(spec, level_of(spec.group, self.gpus_per_host))

    def bandwidth(self, spec: CollectiveSpec, level: str) -> float:
        """Bytes/us the collective's bottleneck sustains (see the module's assumptions)."""
        b = self.beta_bytes_per_us[level]
        if level == "intra_host" or spec.kind in ("send", "recv"):
            return b
        return min(b * rails(spec.group, self.gpus_per_host, self.nics_per_host),
                   self.beta_bytes_per_us["intra_host"])

    def retime(self, measured_us: float, old: CollectiveSpec, new: CollectiveSpec) -> float:
        """Measured duration plus the model's change from `old` to `new` (waiting is kept)."""
        if old == new:
            return measured_us
        try:
            delta = self._deltas[(old, new)]
        except KeyError:
            delta = self._deltas[(old, new)] = self.time_us(new) - self.time_us(old)
        return max(measured_us + delta, 0.0)

    def as_dict(self) -> dict:
        return {lv: {"alpha_us": round(self.alpha_us[lv], 3),
                     "bandwidth_gb_s": round(self.beta_bytes_per_us[lv] / 1e3, 3),
                     "fixed_us": round(self.level_fixed_us.get(lv, 0.0), 3),
                     **({"fill_us": round(self.fill_us[lv], 3)} if lv in self.fill_us else {}),
                     "source": self.source.get(lv, "profile")} for lv in LEVELS} | {"fixed_us": self.fixed_us} | (
            {"send_recv": {k: v for k, v in self.p2p.as_dict().items() if k in LEVELS}} if self.p2p is not None else {})


def fit_alpha_beta(samples: list[tuple[CollectiveSpec, float]], profile: dict | None = None,
                   quantile: float = 0.1, reference: "AlphaBeta | None" = None,
                   sweep: bool = False) -> AlphaBeta:
    """Fit alpha and beta per level from (spec, measured duration) samples. `reference`: a model fitted on
    the cluster's own collectives elsewhere (nccl-tests output, `nccl_tests.py`): a level without samples
    takes its latency, constant and bandwidth where it has them, instead of the profile's. `sweep`: the samples
    are a benchmark's sweep of sizes and group sizes (nccl-tests'): least squares on relative, not absolute,
    residuals (sizes over three orders of magnitude would otherwise be fitted to the largest alone), and a
    fill-up term where they span three or more group sizes: NCCL reaches its bandwidth only on large
    messages, bandwidth x size / (size + half), which adds factor x half / bandwidth to each call, factor the
    share of the message each rank moves (2(n-1)/n for an all-reduce)."""
    profile = profile or load_profile()
    p2p = [x for x in samples if x[0].kind in P2P]
    if sweep and p2p and len(p2p) < len(samples):
        model = fit_alpha_beta([x for x in samples if x[0].kind not in P2P], profile, quantile, reference, sweep)
        model.p2p = fit_alpha_beta(p2p, profile, quantile, sweep=True)
        return model
    gph = int(profile.get("gpus_per_host", 8))
    fixed = float(profile.get("kernel_fixed_us", 0.0))
    nics = int(profile.get("nics_per_host", gph))
    alpha, beta, source, level_fixed, fill = {}, {}, {}, {}, {}
    groups: dict[tuple, list[float]] = {}
    for spec, dur in samples:
        n = len(spec.group) if spec.group else 1
        steps, factor = steps_and_factor(spec.kind, n)
        if steps == 0:
            continue
        lv = level_of(spec.group, gph)
        share = 1 if (lv == "intra_host" or spec.kind in ("send", "recv")) else rails(spec.group, gph, nics)
        key = (lv, steps, factor * spec.nbytes / share, factor if sweep else 0.0)   # sweep: the fill-up reads it
        groups.setdefault(key, []).append(float(dur))
    for lv in LEVELS:
        prof = profile["levels"][lv]
        a_prof = float(prof["step_latency_us"])
        b_prof = float(prof["bandwidth_gb_s"]) * 1e3
        pts = [(k[1], k[2], float(np.quantile(v, quantile)), k[3]) for k, v in groups.items() if k[0] == lv]
        if not pts and reference is not None and reference.source.get(lv, "profile") != "profile":
            alpha[lv], beta[lv] = reference.alpha_us[lv], reference.beta_bytes_per_us[lv]
            level_fixed[lv] = reference.level_fixed_us.get(lv, 0.0) + reference.fixed_us - fixed
            if lv in reference.fill_us:
                fill[lv] = reference.fill_us[lv]
            source[lv] = f"nccl-tests ({reference.source[lv]})"
            continue
        if not pts:
            alpha[lv], beta[lv], source[lv] = a_prof, b_prof, "profile"
            continue
        steps = np.array([p[0] for p in pts])
        moved = np.array([p[1] for p in pts])
        t = np.array([p[2] for p in pts]) - fixed
        if len(np.unique(moved)) >= 2:
            if sweep and len(np.unique(steps)) >= 3:
                fit = _fit_sweep(steps, moved, t, np.array([p[3] for p in pts]))
                if fit is not None:
                    alpha[lv], beta[lv], level_fixed[lv], fill[lv] = fit
                    source[lv] = "fit with fill-up"
                    continue
            fit = _fit_level(steps, moved, t, a_prof, 1.0 / np.maximum(t, 1e-3) if sweep else None)
            if fit is not None:
                alpha[lv], beta[lv], level_fixed[lv], source[lv] = fit
                continue
        # one size only (or a degenerate fit): alpha from the profile, beta from the samples; where some
        # move a megabyte or more, those alone (a few bytes' time is latency and waiting: an FSDP run's
        # grad-norm all-reduce of 4 bytes waits 6 ms for its peers, and read as bandwidth it dragged the
        # median rate down by a quarter)
        big = moved >= BANDWIDTH_BYTES if np.any(moved >= BANDWIDTH_BYTES) else moved > 0
        rate = (t[big] - steps[big] * a_prof) / moved[big]
        rate = rate[rate > 0]
        if len(rate):
            alpha[lv], beta[lv], source[lv] = a_prof, float(1.0 / np.median(rate)), "fit beta, profile alpha"
        else:
            alpha[lv], beta[lv], source[lv] = a_prof, b_prof, "profile"
    return AlphaBeta(p2p=reference.p2p if reference is not None and not p2p else None,
                     alpha_us=alpha, beta_bytes_per_us=beta, fixed_us=fixed, level_fixed_us=level_fixed, fill_us=fill,
                     gpus_per_host=gph, nics_per_host=nics, source=source)


def _fit_sweep(steps: np.ndarray, moved: np.ndarray, t: np.ndarray, factor: np.ndarray):
    """(alpha, beta, constant, fill-up) of a benchmark's sweep: non-negative least squares on relative
    residuals (NCCL switches protocol and algorithm with the size, so the terms are not exactly linear and
    an unconstrained fit can trade a negative latency for a larger constant); None without a bandwidth."""
    from scipy.optimize import nnls

    w = 1.0 / np.maximum(t, 1e-3)
    cols = np.column_stack([np.ones_like(moved), steps, moved, factor])
    sol, _ = nnls(cols * w[:, None], t * w)
    if sol[2] <= 0:
        return None
    return float(sol[1]), float(1.0 / sol[2]), float(sol[0]), float(sol[3])


def _fit_level(steps: np.ndarray, moved: np.ndarray, t: np.ndarray, a_prof: float, weight=None):
    """(alpha, beta, constant, source) of one level from its (steps, bytes moved, time beyond the
    kernel's fixed part) points, or None. With three or more step counts (group sizes), the
    per-step latency, the bandwidth and a per-collective constant are all fitted; with fewer the
    latency cannot be told from the constant, so it comes from the profile. `weight`: per point (None: 1)."""
    w = np.ones_like(t) if weight is None else weight
    if len(np.unique(steps)) >= 3:
        sol, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(moved), steps, moved]) * w[:, None], t * w, rcond=None)
        # a third group size seen only in messages of a few bytes does not tell the latency: their time
        # is waiting (an FSDP run's 4-byte grad-norm all-reduce over 4 ranks, 6 ms, fitted 126 us per step)
        if sol[1] >= 0 and sol[2] > 0 and len(np.unique(steps[moved >= BANDWIDTH_BYTES])) >= 3:
            return float(sol[1]), float(1.0 / sol[2]), float(max(sol[0], 0.0)), "fit"
    sol, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(moved), moved]) * w[:, None], (t - steps * a_prof) * w,
                              rcond=None)
    if sol[1] > 0:
        return a_prof, float(1.0 / sol[1]), float(max(sol[0], 0.0)), "fit beta and constant, profile alpha"
    return None
