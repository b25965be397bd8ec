# ft-membench workflow: matrix -> one isolated benchmark per cell -> table -> report.
#
#   snakemake --cores 1 all                               # the default matrix
#   snakemake --cores 1 all --config matrix=my.yaml       # another matrix
#
# Cells come from bench.matrix (the same loader pytest uses); a bad matrix stops here,
# before anything runs. Each cell's rule reruns only when its spec changes (params).
# One cell is one pytest-benchmark run of exactly that cell (bench/conftest.py --cell-out),
# which starts one worker process: rule -> pytest -> worker.
import json
import sys

from bench.matrix import DEFAULT_MATRIX, load
from bench.resources import CellResources

MATRIX = config.get("matrix", str(DEFAULT_MATRIX))
CELLS = load(MATRIX)
# per-cell job resources (GPUs from world size and GPU profile): bench/resources.py;
# config gpu_models maps GPU profile names to a cluster's GPU types
RES = CellResources(CELLS, config.get("gpu_models", {}))
PY = sys.executable  # the interpreter snakemake runs in, wherever PATH points
CELL_TEST = f"{workflow.basedir}/bench/test_cells.py"

localrules: table, report, fits
# sim cells get a fits search (bench/fits.py): how far each model x technique goes on each GPU
FIT_JOBS = 2
SIM_CELLS = [c for c, spec in CELLS.items() if spec["mode"] == "sim"]


def spec_of(wildcards):
    return json.dumps(CELLS[wildcards.cell], sort_keys=True)


wildcard_constraints:
    cell="[a-z0-9.+_-]+",


rule all:
    input:
        "results/report.html",
        "results/fits.csv",
        # named too so that a deleted cell JSON is rerun (alone), not silently skipped
        expand("results/cells/{cell}.json", cell=CELLS),


rule cell:
    output:
        "results/cells/{cell}.json",
    log:
        "results/logs/{cell}.log",
    params:
        spec=spec_of,
    resources:
        gpu=RES.gpu,
        gpu_model=RES.gpu_model,
        cpus_per_task=RES.cpus_per_task,
        mem_mb=RES.mem_mb,
        runtime=RES.runtime,
    shell:
        "exec {PY} -m pytest {CELL_TEST} --matrix {MATRIX} --cell {wildcards.cell} --cell-out {output}"
        " --worker-logs results/logs -p no:cacheprovider -q -rA > {log} 2>&1"


rule fit:
    # the largest sequence at batch 1 and batch at the study's length that fit, per GPU: a few
    # simulations in one warm worker (bench/simpool.py), the cell's own trace reused
    input:
        "results/cells/{cell}.json",
    output:
        "results/fits/{cell}.json",
    log:
        "results/logs/fits/{cell}.log",
    params:
        spec=spec_of,
    threads: FIT_JOBS  # its sample shapes two at a time (Snakemake scales it down to --cores)
    resources:
        gpu=0,  # a CPU job on a cluster too (bench/resources.py)
        cpus_per_task=RES.fit("cpus_per_task", FIT_JOBS),
        mem_mb=RES.fit("mem_mb", FIT_JOBS),
        runtime=RES.fit("runtime", FIT_JOBS),
    shell:
        "{PY} -m bench.fits --matrix {MATRIX} --cell {wildcards.cell} --out {output} --jobs {threads} > {log} 2>&1"


rule fits:
    input:
        expand("results/fits/{cell}.json", cell=SIM_CELLS),
    output:
        "results/fits.csv",
    log:
        "results/logs/fits.log",
    shell:
        "{PY} -m bench.fits --matrix {MATRIX} --collect {input} --out {output} > {log} 2>&1"


rule table:
    input:
        expand("results/cells/{cell}.json", cell=CELLS),
    output:
        table="results/table.csv",
        manifest="results/table.meta.json",
    log:
        "results/logs/table.log",
    shell:
        # --matrix: a cell without a file, or a record made from other inputs, is an error row
        "{PY} -m report.table {input} --matrix {MATRIX} --out {output.table} > {log} 2>&1"


rule report:
    input:
        table=rules.table.output.table,
        fits=rules.fits.output[0],
    output:
        "results/report.html",
    log:
        "results/logs/report.log",
    shell:
        "{PY} -m report.build {input.table} --fits {input.fits} --out {output} > {log} 2>&1"


# Two results folders compared (report/versus.py); an incomplete comparison fails the job,
# add --keep-incomplete to keep its page:
#   snakemake --cores 1 versus --config old=results/reference new=results/rerun [out=results/versus]
rule versus:
    localrule: True
    input:
        old=config.get("old", "results/reference"),
        new=config.get("new", "results"),
    output:
        html=config.get("out", "results/versus") + "/versus.html",
        csv=config.get("out", "results/versus") + "/versus.csv",
    log:
        "results/logs/versus.log",
    params:
        out=config.get("out", "results/versus"),
    shell:
        "{PY} -m report.versus {input.old} {input.new} --out {params.out} > {log} 2>&1"
