"""Turn cell results into a table and one self-contained HTML report. Never imports torch.

    python -m report.table results/cells/*.json --out results/table.csv
    python -m report.build results/table.csv --out results/report.html

``report.table`` checks run records against their contract (bench/records/record.py) and flattens them
into one long-form row per cell, a record that breaks it becoming an error row; it writes the
CSV with a manifest beside it (``table_check``), and ``report.build`` refuses a table that does
not match its manifest. ``report.build`` reads that CSV, and only that, and renders
report/template.html.j2 (with page.css.j2 and page.js.j2 inlined) from the sections of:

- ``sections``: how the numbers were obtained, the summary table, the pictures, peer estimates;
- ``recommend``: the fastest fitting combination and the cheapest fix per model and GPU;
- ``claims``: common advice checked against the run;
- ``plots``, ``plot_pareto``, ``plot_fits``, ``plot_steps``: the seaborn pictures;
- ``compare`` (which cells compare with which) and ``fmt`` (numbers, provenance).

One unit family throughout: GiB = 2^30 bytes.
"""

GIB = 2**30
