"""Search answers pass a gate like records: an answer outside its row's own
limit, one that fits although its own sampled peak exceeds the card, or a non-number where a
number belongs, is an error row ("rerun to search again"), never an answer, never a traceback."""
import csv
from pathlib import Path

from bench.search import fits_csv
from report import fits_table

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "results" / "reference" / "fits.csv"


def ref_rows():
    with open(REF, newline="") as fh:
        return list(csv.DictReader(fh))


def answered(rows):
    return next(r for r in rows if r["batch_answer"] == "fits" and r["seq_answer"] in ("fits", "beyond"))


def test_every_reference_search_row_holds():
    assert [(r["cell"], r["gpu"]) for r in ref_rows() if fits_csv.row_problems(r)] == []


def test_an_answer_beyond_its_own_limit_or_peak_is_refused():
    row = answered(ref_rows())
    assert fits_csv.refused(row, "x") is row
    big = dict(row, max_batch_at_seq="9999")
    out = fits_csv.refused(big, "fits-cli/x.json")
    assert out["batch_answer"] == out["seq_answer"] == "error" and "rerun to search again" in out["reason"]
    assert "max_batch_at_seq '9999' is not an answer within the row's own batch_limit" in out["reason"]
    assert "9999" not in fits_csv.answer_text(out, "batch").split(":")[0]
    peak = int(row["peak_at_max_batch_bytes"])
    assert "exceeds the card's capacity" in fits_csv.refused(row, "x", capacity=peak - 1)["reason"]
    assert "is not a count" in fits_csv.refused(dict(row, max_batch_at_seq="<b>lots</b>"), "x")["reason"]


def test_the_report_reads_an_edited_fits_csv_as_error_rows_not_answers(tmp_path):
    rows = ref_rows()
    i = rows.index(answered(rows))
    rows[i] = dict(rows[i], max_batch_at_seq="777777")
    j = next(k for k, r in enumerate(rows) if k != i and r["seq_answer"] == "fits")
    rows[j] = dict(rows[j], max_seq_at_batch1="<script>alert(1)</script>")
    path = tmp_path / "fits.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    df = fits_table.read_fits(path)
    assert df.iloc[i]["batch_answer"] == "error" and "777777" in df.iloc[i]["reason"]
    assert df.iloc[j]["seq_answer"] == "error" and "rerun to search again" in df.iloc[j]["reason"]
    assert "777777" not in df["max_batch_at_seq"].tolist()
