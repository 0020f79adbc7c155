"""Every engine bench's JSON says where, when, at which commit and by which command."""

from __future__ import annotations

import re

from provetop.engine.bench import meta


def test_the_meta_block_names_machine_date_commit_and_command(monkeypatch):
    monkeypatch.setenv("PROVETOP_COMMIT", "abc1234")
    monkeypatch.setattr(meta.shutil, "which", lambda _name: None)  # no nvidia-smi here
    block = meta.bench_meta(["bench", "flood", "--pairs", "5"])
    assert block["commit"] == "abc1234"
    assert block["command"] == "provetop bench flood --pairs 5"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", block["date"])
    assert re.fullmatch(r"\d+ CPUs", block["machine"]) and block["gpus"] == []
