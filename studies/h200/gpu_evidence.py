"""Record the H200 evidence traces (the measured runs the H200 checks read): the bundled GPT, every
configuration twice.

    bash studies/h200/gpu_evidence.sh DEST                             # on the GPU: record, pack, pieces to DEST
    python studies/h200/gpu_evidence.py --out DIR                      # on the GPU (bf16, side stream)
    python studies/h200/gpu_evidence.py --out DIR --device cpu --tiny  # same code path, tiny sizes

The recorder is `lumos.capture.evidence` (the pre-registered check records with its `record_one`
and `pack` too); its docstring says what is written. `resources/traces/h200/` was recorded this way.
"""

import sys

from lumos.capture.evidence import main

if __name__ == "__main__":
    sys.exit(main())
