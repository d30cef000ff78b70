"""Graph surgery: how to CHANGE a run (DP, TP, PP, layers, width, micro-batches, sharding, speed).

Each transform takes a `plan.Plan` (the run graph plus what the run is, `lumos.model`) and returns
one with the graph changed, re-timing what it touches through the suppliers of `lumos.durations`.
Which changes to make, and replaying the result, is `lumos.predict`, one layer up. Never imports
the emulator.
"""
