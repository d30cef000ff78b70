"""What-if prediction: graph surgery (DP, PP, layers, width) plus the duration suppliers it needs.

Sits beside `lumos.graph` and uses `lumos.sim`; never imports the emulator.
"""
