# The Lumos pipeline: `snakemake --cores 8` regenerates every table and figure.
# Data order: emulate -> replay (real, emulated; Lumos, dPRO-style) -> predict -> ablate -> aggregate -> figures.
# Beside it: the emulator itself against published measurements (realism), and whether the
# prediction intervals cover the emulated actual of other seeds (coverage), and predictions from an emulated base
# against published hardware measurements (endtoend).
# The sweep is in config/config.yaml; model/cluster/simulator/ablation settings are Hydra groups under config/.
# `snakemake --report report.html` afterwards: every table and figure in one HTML file (workflow/rules/report.smk).
# See docs/pipeline.md.
from snakemake.utils import min_version, validate

min_version("8.0")


# A --configfile is a complete pipeline config (e.g. config/profile/tiny.yaml) and replaces this one;
# --config key=value still overrides single keys of whichever is used.
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/report.smk"


report: "workflow/report/workflow.rst"


onstart:
    # Compile the numba kernels (reader, simulator) once, before parallel jobs race to fill the same cache.
    warm_numba()


rule all:
    input:
        final_outputs(),
    default_target: True


include: "workflow/rules/emulate.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/endtoend.smk"
include: "workflow/rules/h200.smk"
include: "workflow/rules/speed.smk"
include: "workflow/rules/sharded.smk"
include: "workflow/rules/from_one_gpu.smk"
include: "workflow/rules/llama.smk"
include: "workflow/rules/schedules.smk"
include: "workflow/rules/moe.smk"
include: "workflow/rules/transfer.smk"
include: "workflow/rules/realism.smk"
include: "workflow/rules/coverage.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
