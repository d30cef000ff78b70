"""Running a prediction: the base as a plan, the target's run, search, and the effects settled by replay.

`options` says how a prediction is made (one frozen `PredictOptions`); `whatif` fits the base
plan and applies the changes (`lumos.transform` does the surgery);
`prediction` replays the target and settles, in one fixed point (`fixed_point`), the peer waits
(`peer_waits`), NIC sharing (`nic_sharing`) and compute slowed under communication (`contention`);
`memory` and `memory_calibration` say whether it fits; `search` ranks layouts; `dp_host` predicts
a CPU run's data parallelism on host collectives. Metrics of a replay (breakdown, errors, critical
path, intervals) are `lumos.analysis`, one layer down.
"""
