"""A valid recording ``rec`` in a test's working directory, and its index read and rewritten:
what the recording-file tests plant hostile or broken content into."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from harness.recording import recording
from tests import recording_functions as rf


def make_rec_dir(tmp_path, monkeypatch) -> Path:
    """A valid recording ``rec`` in the working directory (messages name ``rec/...``)."""
    monkeypatch.chdir(tmp_path)
    with recording("rec", program="-m demo"):
        rf.Scale.apply(torch.arange(6.0).reshape(2, 3).t(), 2.0)
        rf.Legacy.apply(torch.ones(4), torch.ones(4))
    return Path("rec")


def read_doc(rec_dir: Path) -> dict:
    return json.loads((rec_dir / "recording.json").read_text())


def write_doc(rec_dir: Path, doc: dict) -> None:
    (rec_dir / "recording.json").write_text(json.dumps(doc))
