"""What-if prediction: graph surgery (DP, PP, layers, width) plus the duration suppliers it needs.

Sits beside `lumos.baselines`, above `lumos.sim`; replaying and scoring what it builds is
`lumos.analysis` (one layer up). Never imports the emulator.
"""
