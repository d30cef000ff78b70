"""A pre-registered hardware check of `lumos predict`: predictions committed before the recording.

    python studies/prereg/prereg_h200.py predict [--out benchmarks/prereg/predictions.csv]
    python studies/prereg/prereg_h200.py predict --pooled     # -> benchmarks/prereg/predictions_pooled.csv
    bash studies/prereg/prereg_h200.sh DEST [--budget-s S]      # on the GPU: `record --pack`, pieces to DEST
    python studies/prereg/prereg_h200.py record --out DIR [--device cuda|cpu] [--tiny] [--budget-s S] [--pack]
    python studies/prereg/prereg_h200.py score --traces DIR [--predictions CSV] [--out benchmarks/prereg/scores.md]

The check is `lumos.studies.prereg` (its docstring says what each command does); this script runs
its `main`. studies/prereg/README.md has the question, the state and what a GPU session does.
"""

import sys

from lumos.studies.prereg import main

if __name__ == "__main__":
    sys.exit(main())
