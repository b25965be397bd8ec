"""The allocator's steady state (bench/estimate/steady.py): a trace's last step repeated as the
run would repeat it. Held against real runs: a real training loop traced for three steps is, event
for event, its first two steps with the last one repeated."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from bench.estimate import replay, steady
from bench.worker import memtrack

MiB = 2**20


def _train_trace(steps: int, accumulate_grads_to_none: bool = True) -> dict:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    t = memtrack.MemTracker()
    with t:
        model = LlamaForCausalLM(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = None
        for _ in range(steps):
            t.start_step()
            with t.in_phase("forward"):
                batch = torch.randint(0, 256, (2, 32))  # the loader's next batch: the last one freed here
                loss = model(input_ids=batch, labels=batch).loss
            with t.in_phase("backward"):
                loss.backward()
                del loss
            with t.in_phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=accumulate_grads_to_none)
    return t.trace()


def _canonical(trace: dict) -> list:
    """The trace's events with serials renamed in order of first appearance."""
    col, names = trace["columns"], {}
    return [(col["kind"][i], names.setdefault(col["serial"][i], len(names)), col["bytes"][i], col["step"][i],
             trace["phases"][col["phase"][i]], trace["ops"][col["op"][i]])
            for i in range(len(col["kind"]))]


@pytest.mark.parametrize("to_none", [True, False])
def test_a_real_loops_third_step_is_its_second_repeated(to_none):
    two, three = _train_trace(3, to_none), _train_trace(4, to_none)
    # the four-step run's first three steps are the three-step run (the same program, the same seed)
    extended, info = steady.extend(two, repeats=1)
    assert info == {"repeats": 1, "why_not": None, "steps_in_trace": 3}
    assert _canonical(extended) == _canonical(three)
    assert replay.replay(extended)["reserved_peak_bytes"] == replay.replay(three)["reserved_peak_bytes"]


def _hand(*steps, before=()):
    """A trace of steps of ("a", serial, bytes) / ("f", serial) events, after ``before`` (step -1)."""
    cols = {k: [] for k in ("kind", "serial", "bytes", "step", "phase", "op", "category")}
    sizes = {}
    for s, events in enumerate([before, *steps], start=-1):
        for ev in events:
            if ev[0] == "a":
                sizes[ev[1]] = ev[2]
            for k, v in zip(cols, (int(ev[0] == "a"), ev[1], sizes[ev[1]], s, 0, 0, 0)):
                cols[k].append(v)
    return {"columns": cols, "phases": ["forward"], "ops": ["aten.empty"], "categories": ["activations"],
            "reset_at": 0, "max_events": 10**6, "dropped_events": 0}


def test_a_carry_stands_for_what_the_step_freed_and_the_batch_is_made_again():
    # step 1 frees the batch (1) made before it and the carry (2) of step 0, keeps its own carry (4)
    tr = _hand([("a", 2, 4 * MiB)], [("f", 1), ("a", 4, 4 * MiB), ("f", 2), ("a", 5, MiB), ("f", 5)],
               before=[("a", 1, 1000)])
    ext, info = steady.extend(tr, repeats=2)
    col = ext["columns"]
    added = list(zip(col["kind"], col["bytes"], col["step"]))[len(tr["columns"]["kind"]):]
    one_copy = [(1, 1000, None), (0, 1000, None), (1, 4 * MiB, None), (0, 4 * MiB, None), (1, MiB, None),
                (0, MiB, None)]
    assert [(k, b) for k, b, _ in added] == [(k, b) for k, b, _ in one_copy] * 2
    assert [s for *_, s in added] == [2] * 6 + [3] * 6
    live = set()
    for k, s in zip(col["kind"], col["serial"]):  # every free is of a live storage, each storage made once
        assert (s not in live) if k else (s in live)
        (live.add if k else live.discard)(s)
    assert info["repeats"] == 2


@pytest.mark.parametrize("tr, why", [
    (_hand([("a", 1, MiB)]), "one training step"),
    (_hand([("a", 1, MiB)], [("a", 2, MiB)]), "memory grows"),
    (_hand([], [("f", 1)], before=[("a", 1, 128 * MiB)]), "not a training step's batch"),
])
def test_what_is_not_a_steady_step_is_not_extended_and_says_why(tr, why):
    ext, info = steady.extend(tr)
    assert ext is tr and info["repeats"] == 0 and why in info["why_not"]


def test_the_model_reads_the_steady_state_and_says_so():
    tr = _train_trace(3)
    got = replay.model(tr, None, {}, 0)
    assert 1 <= got["steady_state"]["repeats"] <= steady.MAX_REPEATS and got["steady_state"]["how"] == steady.HOW
    assert got["steady_state"]["settled"]
    assert got["trace_events"] == len(tr["columns"]["kind"])
    assert got["reserved_peak_bytes"] >= replay.replay(tr)["reserved_peak_bytes"]
    assert replay.reserved_peak(tr) == got["reserved_peak_bytes"]


def test_repeats_are_added_while_the_last_one_still_reserves_more():
    tr = _train_trace(3)
    out, ext, info = replay.settled(tr)
    peaks = replay.replay(steady.extend(tr, steady.MAX_REPEATS)[0])["step_reserved_peak_bytes"]
    grown = [i for i in range(3, len(peaks)) if peaks[i] > peaks[i - 1]]  # the copies that reserved more
    assert info["repeats"] == min(steady.MAX_REPEATS, 1 + len(grown)) and out["reserved_peak_bytes"] == max(peaks[:2 + info["repeats"] + 1])
    assert len(ext["columns"]["kind"]) > len(tr["columns"]["kind"])
