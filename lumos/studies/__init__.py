"""Code that the scripts under `benchmarks/` and `studies/` share, and that their tests import.

Nothing else in `lumos` imports this package: it sits beside the command line as one more user of
the library. It exists so that those scripts run as plain `python benchmarks/X.py` /
`python studies/TOPIC/X.py` (lumos installed, `pip install -e .`) with no `sys.path` patch, and so
that the tests import what they pin (`lumos.studies.prereg`, `lumos.studies.h200.kernel_ms`)
instead of loading a script by its file path.

- `emulated`: the emulated traces the timing benchmarks read (made once with `lumos emulate`).
- `h200`: where the H200 recordings are, a target's `lumos predict` flags as `predict` arguments,
  kernel time by class (the H200 studies, `tests/durations/test_sustained_clocks.py`).
- `prereg`: the pre-registered H200 check (`studies/prereg/`, `tests/benchmarks/test_prereg.py`).
  Its recorder is `lumos.capture.evidence`, which lives in `lumos.capture` because it imports torch.

These modules read the checkout they sit in (`ROOT`: the recordings under `resources/`, the
committed predictions under `benchmarks/prereg/`), so they need an editable install or
`PYTHONPATH` set to the checkout. This module imports nothing: `lumos.studies.prereg` must import on
a GPU machine's Python that has torch but not numba or scipy.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the checkout: lumos/studies/__init__.py -> lumos -> ROOT
