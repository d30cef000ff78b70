"""What a run IS, read from its trace: layers, stages, shapes, parallel degrees, DP flavour, module calls.

Nothing here changes a graph or prices work: `lumos.transform` changes the graph and
`lumos.durations` prices it, both from what this package reads. `ops` says what an op means
(its class, a GEMM's m, k, n, an attention's batch, sequence, heads and head dim) for every reader
and cost model alike.
"""
