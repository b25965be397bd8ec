"""Turn cell results into a table and one self-contained HTML report. Never imports torch.

    python -m report.table results/cells/*.json --out results/table.csv
    python -m report.build results/table.csv --out results/report.html

``report.table`` flattens run records (bench/record.py) into one long-form row per cell;
``report.build`` reads that CSV and renders report/template.html.j2 with the charts of
``report.plots`` inlined. One unit family throughout: GiB = 2^30 bytes.
"""

GIB = 2**30
