"""Hub errors that help: the download command that is installed, a path as the
offline way out, no download suggested for what is not a Hub id, and no retries when the Hub
cannot be reached."""
from __future__ import annotations

import shutil
import time

import pytest

from bench.cells import hubmodel, modelref


def test_the_hint_names_the_installed_cli_and_a_path(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda c: "/usr/bin/hf" if c == "hf" else None)
    hint = modelref.fetch_hint("mistralai/Mistral-7B-v0.1")
    assert hint.startswith("`hf download mistralai/Mistral-7B-v0.1 config.json` fetches it alone")
    assert "path of a config.json" in hint and "huggingface-cli" not in hint


def test_a_matrix_style_name_is_not_offered_a_download():
    hint = modelref.fetch_hint("mistral-7b")
    assert "download" not in hint and "not a Hugging Face id" in hint and "path of a config.json" in hint


def test_an_unreachable_hub_is_answered_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hubmodel, "reachable", lambda timeout=3.0: False)
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.monotonic()
    with pytest.raises(modelref.ModelError) as err:
        hubmodel.ensure_config("some-org/some-model-not-cached")
    assert time.monotonic() - t0 < 5
    assert "the Hub cannot be reached" in str(err.value) and "path of a config.json" in str(err.value)
