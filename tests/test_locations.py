"""Source locations in messages read the same on every machine (no absolute paths)."""

from __future__ import annotations

import os
import sysconfig

import torch

import autograd_function_db
import harness.core.locations as loc
from harness.core.locations import describe_exception, relative_file


def test_torch_the_suite_the_registry_and_the_stdlib_are_relative_to_their_homes():
    torch_file = os.path.join(os.path.dirname(torch.__file__), "_functorch", "vmap.py")
    assert relative_file(torch_file) == "torch/_functorch/vmap.py"
    assert relative_file(loc.__file__) == "harness/core/locations.py"
    reg = os.path.join(os.path.dirname(autograd_function_db.__file__), "custom_ops.py")
    assert relative_file(reg) == "autograd_function_db/custom_ops.py"
    std = os.path.join(sysconfig.get_paths()["stdlib"], "contextlib.py")
    assert relative_file(std) == "stdlib/contextlib.py"


def test_other_installed_packages_keep_their_site_packages_path():
    path = os.path.join(
        os.sep, "home", "ci", ".venv", "lib", "python3.11", "site-packages", "roma", "mappings.py"
    )
    assert relative_file(path) == "site-packages/roma/mappings.py"


def test_user_files_are_relative_to_the_working_directory_or_shortened(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    monkeypatch.chdir(tmp_path)
    assert relative_file(str(tmp_path / "pkg" / "model.py")) == "pkg/model.py"
    elsewhere = os.path.join(os.sep, "somewhere", "else", "project", "model.py")
    assert relative_file(elsewhere) == ".../project/model.py"
    assert relative_file("<string>") == "<string>"


def test_an_exception_is_described_with_a_portable_location(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "user_fn.py"
    source.write_text(
        "class Rule:\n"
        "    @staticmethod\n"
        "    def vmap(info, in_dims, x):\n"
        "        if x:\n"
        "            raise ValueError('bad rule')\n"
        "        return helper(x)\n"
        "\n"
        "def helper(x):\n"
        "    raise ValueError('bad helper')\n"
    )
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    texts = []
    for x in (True, False):
        try:
            namespace["Rule"].vmap(None, (0,), x)
        except ValueError as e:
            texts.append(describe_exception(e))
    # raised in the rule itself: one location; raised deeper: where it entered the rule first
    assert texts == [
        "ValueError: bad rule (at user_fn.py:5 in vmap)",
        "ValueError: bad helper (in Rule.vmap at user_fn.py:6; raised at user_fn.py:9 in helper)",
    ]
    assert not [t for t in texts if str(tmp_path) in t]
