"""Did a change move the emulator's dense traces? (EMULATED) A digest of every written byte of five configurations
that a new switch must leave alone when it is off: tiny (2x2x4), tiny 1x2x2 with every rank, Llama 3 8B (4 layers)
with CP 2, torchtitan, and tiny over 4 stages at granularity `stage`. Run it at two commits and compare.

    python studies/emulator/trace_digest.py            # one line per configuration: digest, iteration us, overrides
"""

import hashlib

from lumos.emulator import emulate

CONFIGS = [["model=tiny", "seed=3"],
           ["model=tiny", "parallel.tp=1", "parallel.pp=2", "parallel.dp=2", "ranks=all"],
           ["model=llama3_8b", "model.num_layers=4", "parallel.tp=2", "parallel.pp=1", "parallel.dp=2", "parallel.cp=2"],
           ["model=tiny", "training=torchtitan", "parallel.pp=1"],
           ["model=tiny", "parallel.pp=4", "parallel.vp=1", "model.num_layers=8", "emulator.granularity=stage"]]

for overrides in CONFIGS:
    r = emulate(overrides, progress=False)
    digest = hashlib.sha256(b"".join(r.encode(rank).tobytes() for rank in r.ranks)).hexdigest()[:16]
    print(digest, r.iteration_us, " ".join(overrides))
