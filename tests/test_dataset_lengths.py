"""The user's dataset as token lengths (bench/dataset/lengths.py) and the trainer's batch order
(bench/dataset/order.py): real tokenizers (one built here with the tokenizers library, saved and
loaded back through AutoTokenizer as a user's folder is), real files, the real Trainer."""
from __future__ import annotations

import json

import pytest

from bench.dataset import epoch, lengths, order
from bench.dataset.lengths import DatasetError

WORDS = "the a of to and in is you that it he was for on are as with his they at be this have from".split()
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<unk>", "<eos>", "<|user|>", "<|assistant|>", "<|end|>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>",
                                   additional_special_tokens=specials[2:])
    fast.chat_template = TEMPLATE
    out = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(out)
    return str(out)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_text_rows_count_words_and_the_eos(tmp_path, tokenizer_dir):
    tok = lengths.tokenizer(tokenizer_dir)
    f = write_jsonl(tmp_path / "t.jsonl", [{"text": "the a of"}, {"text": " ".join(["the"] * 50)}])
    got, info = lengths.from_dataset(f, tok, max_length=20)
    assert got == [4, 20]           # 3 words + eos; 50 + eos truncated at 20
    assert info["truncated_samples"] == 1 and info["tokens_cut"] == 31 and info["longest"] == 51
    assert info["dataset_type"] == "text"


def test_messages_go_through_the_chat_template(tmp_path, tokenizer_dir):
    tok = lengths.tokenizer(tokenizer_dir)
    msgs = [{"role": "user", "content": "the a"}, {"role": "assistant", "content": "of to and"}]
    f = write_jsonl(tmp_path / "c.jsonl", [{"messages": msgs}])
    got, _ = lengths.from_dataset(f, tok, max_length=100)
    # <|user|> the a <|end|> <|assistant|> of to and <|end|>: transformers 5 returns a dict of input_ids
    assert got == [len(lengths._ids(tok.apply_chat_template(msgs, tokenize=True)))] == [9]


def test_prompt_completion_rows(tmp_path, tokenizer_dir):
    tok = lengths.tokenizer(tokenizer_dir)
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "the a", "completion": " of to"}])
    assert lengths.from_dataset(f, tok, 100)[0] == [5]


@pytest.mark.parametrize("content, says", [
    ('{"text": "the"}\nnot json\n', "p.jsonl: line 2: not valid JSON"),
    ('{"foo": 1}\n', "p.jsonl: row 1: none of the keys messages, prompt, text"),
    ('{"text": "the"}\n{"messages": []}\n', "p.jsonl: row 2: no 'text'"),
    ('{"prompt": "the"}\n', "'prompt' without 'completion'"),
    ('{"text": 5}\n', "p.jsonl: row 1: 'text' must be a string"),
    ('', "p.jsonl: no rows in it"),
])
def test_a_dataset_that_cannot_be_read_names_file_row_and_reason(tmp_path, tokenizer_dir, content, says):
    (tmp_path / "p.jsonl").write_text(content)
    with pytest.raises(DatasetError, match=None) as exc:
        lengths.from_dataset(str(tmp_path / "p.jsonl"), lengths.tokenizer(tokenizer_dir), 100)
    assert says in str(exc.value)


def test_unknown_suffix_and_missing_file(tmp_path):
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match="unknown dataset format '.csv'"):
        lengths.rows(str(tmp_path / "d.csv"))
    with pytest.raises(DatasetError, match="no such file"):
        lengths.rows(str(tmp_path / "none.jsonl"))


def test_no_tokenizer_says_how_to_get_one():
    with pytest.raises(DatasetError) as exc:
        lengths.tokenizer("nobody/no-such-model-xyz")
    assert "--lengths FILE" in str(exc.value) and "hf download nobody/no-such-model-xyz" in str(exc.value)


def test_lengths_file(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("# lengths\n10\n\n5000\n")
    assert lengths.from_file(str(f), 4096)[0] == [10, 4096]
    f.write_text("10\nten\n")
    with pytest.raises(DatasetError, match="l.txt: line 2: 'ten' is not a length"):
        lengths.from_file(str(f), 4096)
    f.write_text("0\n")
    with pytest.raises(DatasetError, match="line 1: length 0: must be 1 or more"):
        lengths.from_file(str(f), 4096)


def test_the_trainers_order():
    lens = [(i * 7919) % 1000 + 1 for i in range(200)]
    seq = order.batches(lens, 4, sampling="sequential")
    assert seq[0] == [0, 1, 2, 3] and len(seq) == 50
    rnd = order.batches(lens, 4, seed=42)
    assert sorted(i for b in rnd for i in b) == list(range(200)) and rnd != seq
    assert order.batches(lens, 4, seed=42) == rnd and order.batches(lens, 4, seed=1) != rnd
    grouped = order.batches(lens, 4, sampling="group_by_length")
    assert lens.index(max(lens)) in grouped[0]   # LengthGroupedSampler: the longest batch first


def test_widths_and_the_replayed_steps():
    lens = [100, 300, 129, 5]
    assert epoch.padded_widths(lens, [[0, 1], [2, 3]]) == [384, 256]
    assert epoch.padded_widths(lens, [[0, 1], [2, 3]], pad_to_multiple_of=200) == [512, 256]
    assert epoch.replayed([128] * 10) == list(range(10))
    widths = [128] * 1000
    widths[500] = 256
    widths[900] = 384
    keep = epoch.replayed(widths)
    assert keep == [*range(8), 498, 499, 500, 501, 502, 898, 899, 900, 901, 902]
    assert epoch.percentile([1, 2, 3, 4], 50) == 2 and epoch.percentile([1, 2, 3, 4], 99) == 4


def test_parquet_and_arrow_rows_are_the_jsonl_rows(tmp_path, tokenizer_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [{"text": "the a of"}, {"text": "to and in is"}]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "d.parquet")
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    tok = lengths.tokenizer(tokenizer_dir)
    want = lengths.from_dataset(write_jsonl(tmp_path / "d.jsonl", rows), tok, 100)[0]
    assert lengths.from_dataset(str(tmp_path / "d.parquet"), tok, 100)[0] == want == [4, 5]
    assert lengths.from_dataset(str(tmp_path / "d.arrow"), tok, 100)[0] == want
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="bad.parquet: cannot read it as .parquet"):
        lengths.rows(str(tmp_path / "bad.parquet"))


def test_a_hub_dataset_not_in_the_cache_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(DatasetError) as exc:
        lengths.rows("nobody/no-such-dataset-xyz")
    assert "not a dataset in the local Hugging Face cache" in str(exc.value)
    assert "hf download --repo-type dataset nobody/no-such-dataset-xyz" in str(exc.value)


def test_a_hub_dataset_in_the_cache_is_read_offline(monkeypatch, tmp_path, tokenizer_dir):
    """The layout huggingface_hub writes (datasets--ORG--NAME/refs/main, snapshots/REV/...), made here."""
    repo = tmp_path / "hub" / "datasets--acme--chat"
    (repo / "snapshots" / "abc123" / "data").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    write_jsonl(repo / "snapshots" / "abc123" / "data" / "train.jsonl", [{"text": "the a of"}, {"text": "to and"}])
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    got, info = lengths.from_dataset("acme/chat", lengths.tokenizer(tokenizer_dir), 100)
    assert got == [4, 3] and info["source"] == "acme/chat"
