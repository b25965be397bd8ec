"""The report's pictures (report/plot_*.py) and their sections, on made-up records.

    pytest tests/test_report_plots.py -q

Each picture is checked on its long-form frame (what it draws) and on the drawn figure, and
for its note when the run has no cells for it.
"""
from __future__ import annotations

import pandas as pd
import pytest

from report import GIB, plot_fits, plot_pareto, plot_steps, sections, table
from tests.records import CLAIM_BASE as BASE
from tests.records import cpu, cpu_records, failed, sim_records, spec


@pytest.fixture(scope="module")
def df():
    seq = [cpu(["s512"], BASE | {"activations": 40_000_000 * 10}, seq_len=512),
           cpu(["s1024"], BASE | {"activations": 80_000_000 * 10}, seq_len=1024),
           cpu(["gc", "s1024"], BASE | {"activations": 20_000_000 * 10}, seq_len=1024),
           failed(spec("tiny-llama", "cpu", ["s2048"], mode="cpu", seq_len=2048), "oom", "over 24 GiB")]
    return table.to_frame(cpu_records() + sim_records() + seq)


def mode(df, m):
    return df[df["mode"] == m]


def test_frontier():
    x = pd.Series([1.0, 2.0, 3.0, 2.0, 3.0])
    y = pd.Series([1.0, 2.0, 3.0, 3.0, 3.0])      # more x costs more y; (2,3) is dominated by (2,2)
    assert plot_pareto.frontier(x, y, maximize_x=True).tolist() == [True, True, True, False, True]
    assert plot_pareto.frontier(x, y, maximize_x=False).tolist() == [True, False, False, False, False]


def test_pareto_long_and_figure(df):
    cpu_long = plot_pareto.pareto_long(mode(df, "cpu"))
    assert cpu_long["x"].notna().all() and set(cpu_long["panel"]) == {"tiny-llama · cpu"}
    front = set(cpu_long.loc[cpu_long["frontier"], "technique"])
    # the lightest cell and the fastest cell are always on the frontier
    assert cpu_long.loc[cpu_long["peak_gib"].idxmin(), "technique"] in front
    assert cpu_long.loc[cpu_long["x"].idxmax(), "technique"] in front
    sim_long = plot_pareto.pareto_long(mode(df, "sim"))
    assert sim_long["x"].max() == pytest.approx(13.3)            # modelled seconds per step, lower is better
    # qlora has the least memory and the fewest FLOPs, gc+bf16 the shortest modelled step: both on the frontier
    assert set(sim_long.loc[sim_long["frontier"], "technique"]) == {"qlora", "gc+bf16"}
    fig = plot_pareto.pareto_figure(sim_long, "sim")
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("modelled step time on h100-80gb") and "FLOP" not in ax.get_xlabel()
    assert {t.get_text() for t in ax.texts} == set(sim_long["technique"])


def test_fits_grid(df):
    long = plot_fits.fits_long(mode(df, "sim"))
    assert len(long) == 6 * 4 and set(long["verdict"]) == {"fits", "tight", "oom"}
    assert plot_fits.gpu_order(long)[0] == "h100-80gb"            # the roomiest card first
    fig = plot_fits.fits_figure(long)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("fits") == (long["verdict"] == "fits").sum() and "tight" in texts
    measured = plot_fits.fits_long(mode(df, "cpu"))
    assert measured.set_index("technique").loc["s2048", "verdict"] == "oom"
    assert set(measured["gpu"]) == {"cpu"}


def test_steps_padding_against_packing(df):
    long = plot_steps.steps_long(mode(df, "cpu"))
    assert set(long["technique"]) == {"padding", "packing"} and len(long) == 10
    pad = long[long["technique"] == "padding"]
    assert pad["gib"].tolist() == pytest.approx([x * 10_000_000 / GIB for x in (30, 35, 33, 41, 41)])
    assert pad["warmup"].tolist() == [True, False, False, False, False]   # spec: warmup_steps 1
    fig = plot_steps.steps_figure(long)
    assert len(fig.axes[0].get_lines()) >= 2


def test_seq_len_groups(df):
    long = plot_steps.seqlen_long(mode(df, "cpu"))
    groups = long.groupby("group")["seq_len"].apply(list).to_dict()
    # the baseline at the study's length (512) and s512 are one point; the oom s2048 has no point
    assert groups == {"baseline": [512, 1024], "gc": [512, 1024]}
    assert "lora" not in set(long["group"])                       # no s<N> cell of lora: not drawn
    fig = plot_steps.seqlen_figure(long)
    assert fig.axes[0].get_xscale() == "log"


def test_pictures_degrade_to_a_note():
    only = table.to_frame([cpu(["baseline"], BASE)])
    for make, note in [(sections.steps_section, "No padding/packing cells in this run."),
                       (sections.seqlen_section, "No sequence-length (s<N>) cells in this run.")]:
        s = make(only, "cpu")
        assert s["image"] is None and s["empty"] == note
    empty = table.to_frame([failed(spec("m", "sim", ["baseline"], mode="sim"), "error", "boom")])
    for make in (sections.breakdown_section, sections.pareto_section, sections.fits_section,
                 sections.steps_section, sections.seqlen_section):
        assert make(empty, "sim")["image"] is None


def test_dollar_names_are_text_not_tex():
    recs = [cpu(["baseline"], BASE) | {"model": "cost$1$x"}, cpu(["gc"], BASE) | {"model": "cost$1$x"}]
    long = plot_pareto.pareto_long(table.to_frame(recs))
    fig = plot_pareto.pareto_figure(long, "cpu")
    assert fig.axes[0].get_title() == "cost$1$x · cpu"
    sections.plots.png(fig)                                       # mathtext would have failed or eaten it


def test_chart_sections_state_their_provenance(df):
    s = sections.pareto_section(df, "sim")
    assert s["image"].startswith("data:image/png;base64,") and s["provenance"] == "simulated, simulated + analytic"
    assert sections.fits_section(df, "cpu")["provenance"] == "cpu-measured"


def test_notes_and_peers(df):
    notes = sections.notes_section(df, "sim")["lines"]
    assert any(line.startswith("Verdict rule: fits: peak + reserve") and "reserve 0.820 GiB" in line for line in notes)
    assert any("analytic: model states / 8 ranks" in line for line in notes)
    peer = {"source": "deepspeed", "what": "ZeRO-3 model states per GPU", "bytes": 10 * GIB, "ours_bytes": 12 * GIB,
            "difference": "ours also counts the optimizer step's temporaries"}
    rec = sim_records()[0]
    rec["details"]["peers"] = [peer, {"source": "accelerate", "what": "weights + Adam", "bytes": 4 * GIB,
                                      "ours_bytes": 5 * GIB}]
    rec["details"]["verdict_notes"] = {"t4": "no bf16 support: verdict optimistic"}
    frame = table.to_frame([rec])
    rows = sections.peers_section(frame, "sim")["rows"]
    assert [(r["source"], r["theirs"], r["ours"]) for r in rows] == [("deepspeed", "10.00", "12.00"),
                                                                     ("accelerate", "4.00", "5.00")]
    assert rows[0]["gap"] == "ours +2.00 GiB (+20.0%)" and rows[0]["why"].startswith("ours also counts")
    assert rows[1]["gap"] == "ours +1.00 GiB (+25.0%)" and rows[1]["why"] == ""
    assert "Verdict caveat for t4 (1 cell): no bf16 support: verdict optimistic" in sections.notes_section(frame, "sim")["lines"]
    assert sections.peers_section(df, "cpu") is None


def test_capacity_lines_are_labelled_and_merged_where_labels_would_collide():
    from report import plots as p
    groups = p.capacity_groups({"rtx-3090": 23.1, "rtx-4090": 23.99, "a100-80g": 80.0, "t4": 14.7}, span=100)
    assert groups == [(14.7, ["t4"]), (23.1, ["rtx-3090", "rtx-4090"]), (80.0, ["a100-80g"])]
    long = p.breakdown_long(table.to_frame(sim_records()))
    fig = p.breakdown_figure(long, capacities={"t4": 14.7, "rtx-4090": 23.99, "a100-80g": 80.0})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]                  # a 1,300 GiB axis: 15 and 24 GiB share a line
    assert labels == ["t4…rtx-4090 15-24", "a100-80g 80"]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in dashed] == pytest.approx([14.7, 80.0])


def dashed_levels(ax) -> list[float]:
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"
            and len(set(line.get_ydata())) == 1 and list(line.get_xdata()) == [0, 1]]


def test_memory_charts_in_sim_draw_each_cards_capacity(df):
    """The Pareto and peak-against-length charts carry the cards' capacities as labelled
    horizontal lines in sim (every card judged against), none in cpu (no card)."""
    sim = mode(df, "sim")
    caps = sections.capacities_gib(sim)
    assert set(caps) == {"h100-80gb", "l40s", "rtx-a6000", "t4"}
    fig = plot_pareto.pareto_figure(plot_pareto.pareto_long(sim), "sim", caps)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.texts if t.get_text().endswith(("15-48", "79"))]
    # a 1,100 GiB axis: t4, l40s and the a6000 are closer than a label's height and share a line
    assert labels == ["t4…rtx-a6000 15-48", "h100-80gb 79"]
    assert dashed_levels(ax) == pytest.approx([caps["t4"], caps["h100-80gb"]])
    cpu_fig = plot_pareto.pareto_figure(plot_pareto.pareto_long(mode(df, "cpu")), "cpu",
                                        sections.capacities_gib(mode(df, "cpu")))
    assert sections.capacities_gib(mode(df, "cpu")) == {} and dashed_levels(cpu_fig.axes[0]) == []
    # peak against length with peaks near 40 GiB: the axis reaches the first card above them;
    # the cards beyond are named at its top, not drawn
    long = pd.DataFrame({"cell": ["a", "b"], "mode": "sim", "model": "m", "gpu": "sim", "technique": ["s512", "s2048"],
                         "group": "qlora", "seq_len": [512, 2048], "gib": [38.0, 42.0], "panel": "m"})
    ax = plot_steps.seqlen_figure(long, caps).axes[0]
    assert dashed_levels(ax) == pytest.approx([caps["t4"], caps["l40s"]])
    assert [t.get_text() for t in ax.texts] == ["t4 15", "l40s 44", "↑ rtx-a6000…h100-80gb 48-79 GiB: above the axis"]
    assert ax.get_ylim()[0] == 0 and caps["l40s"] < ax.get_ylim()[1] < caps["rtx-a6000"]


def test_fits_grid_of_one_gpu_and_long_names_is_laid_out(recwarn):
    """A model judged on one GPU with long technique names: constrained layout used to give up
    (axes collapsed to zero, a warning at build time)."""
    long = pd.DataFrame({"cell": ["a", "b"], "model": "m", "gpu": "a100-80gb", "verdict": ["oom", "fits"],
                         "technique": ["baseline", "bf16+packing+compile+chunked-ce+gc+opt-in-bwd+act-offload+paged"],
                         "capacity_gib": 79.3})
    sections.plots.png(plot_fits.fits_figure(long))
    assert not [w for w in recwarn if "layout not applied" in str(w.message)]
