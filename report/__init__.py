"""Turn cell results into a table and one self-contained HTML report. Never imports torch.

    python -m report.table results/cells/*.json --out results/table.csv
    python -m report.build results/table.csv --out results/report.html

``report.table`` flattens run records (bench/record.py) into one long-form row per cell;
``report.build`` reads that CSV and renders report/template.html.j2 (with page.css.j2 and
page.js.j2 inlined) from the sections of:

- ``sections``: how the numbers were obtained, the summary table, the pictures, peer estimates;
- ``recommend``: the fastest fitting combination and the cheapest fix per model and GPU;
- ``claims``: common advice checked against the run;
- ``plots``, ``plot_pareto``, ``plot_fits``, ``plot_steps``: the seaborn pictures;
- ``compare`` (which cells compare with which) and ``fmt`` (numbers, provenance).

One unit family throughout: GiB = 2^30 bytes.
"""

GIB = 2**30
