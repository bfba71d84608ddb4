"""``Settings`` (a run's settings without the CLI's parser) holds what ``afdb check`` parses."""

from __future__ import annotations

import pytest

from harness.cli.main import build_parser
from harness.session.settings import DEFAULTS, Settings

#: What only the command line has: the function it dispatches to, and --debug / --watch.
CLI_ONLY = {"func", "debug", "watch", "watch_interval", "watch_iterations"}


def test_the_defaults_are_afdb_checks_own():
    parsed = vars(build_parser().parse_args(["check", "--recorded", "DIR"]))
    parsed.pop("recorded")
    expected = {k: v for k, v in parsed.items() if k not in CLI_ONLY}
    assert {k: v for k, v in DEFAULTS.items() if k != "recorded"} == expected


def test_given_settings_win_and_mutable_defaults_are_not_shared():
    a = Settings(recorded="D", json="r.json")
    b = Settings()
    assert (a.recorded, a.json, a.quiet, b.recorded) == ("D", "r.json", False, None)
    a.target.append("x")
    assert b.target == [] and DEFAULTS["target"] == []


def test_an_unknown_setting_is_refused():
    with pytest.raises(TypeError, match="unknown settings: jsn"):
        Settings(jsn="r.json")
