"""Declarations written once, read by every path that checks a recording.

``pytest --afdb``, ``afdb check --recorded``, ``afdb record --check`` and ``afdb repro
--recorded`` all call ``declaration_lines``: the lines of

1. the ``[tool.afdb]`` table's ``declare`` (a list of lines, or one string of lines) in
   the project's ``pyproject.toml``;
2. the ini option ``afdb_declare``: under pytest as pytest reads it; on the command line
   from the first file of the working directory pytest itself would take it from:
   ``pytest.ini`` (``[pytest]``), ``pyproject.toml`` (``[tool.pytest.ini_options]``),
   ``tox.ini`` (``[pytest]``), ``setup.cfg`` (``[tool:pytest]``);
3. the command line (``--declare``, ``--afdb-declare``): a line there replaces the file
   lines of the same Function.

The project folder is pytest's rootdir under pytest and the working directory otherwise.
A file that cannot be read as TOML or ini is one ``UsageError`` line.
"""

from __future__ import annotations

import configparser
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError

_INI = (("pytest.ini", "pytest"), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))


def _lines(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return value.splitlines()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise UsageError(
        f"{where}: declare must be a list of lines such as 'pkg.mod:Cls gradient=custom'"
    )


def _pyproject(folder: Path) -> dict[str, Any]:
    path = folder / "pyproject.toml"
    if not path.is_file():
        return {}
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"pyproject.toml: cannot be read ({e})") from None
    return data


def tool_lines(folder: Path) -> list[str]:
    """The ``[tool.afdb] declare`` lines of ``folder/pyproject.toml`` (none without one)."""
    table = _pyproject(folder).get("tool", {}).get("afdb")
    if table is None:
        return []
    if not isinstance(table, dict):
        raise UsageError("pyproject.toml: [tool.afdb] must be a table")
    unknown = sorted(set(table) - {"declare"})
    if unknown:
        raise UsageError(
            f"pyproject.toml: [tool.afdb] has unknown key {unknown[0]!r}; known: declare"
        )
    return _lines(table.get("declare", []), "pyproject.toml: [tool.afdb]")


def ini_lines(folder: Path) -> list[str]:
    """``afdb_declare`` from the ini file pytest would read in ``folder`` (none without)."""
    for name, section in _INI[:1]:
        found = _ini(folder / name, section, required=True)
        if found is not None:
            return found
    ini = _pyproject(folder).get("tool", {}).get("pytest", {}).get("ini_options")
    if isinstance(ini, dict):
        return _lines(ini.get("afdb_declare", []), "pyproject.toml: [tool.pytest.ini_options]")
    for name, section in _INI[1:]:
        found = _ini(folder / name, section, required=False)
        if found is not None:
            return found
    return []


def _ini(path: Path, section: str, *, required: bool) -> list[str] | None:
    """The lines of ``afdb_declare`` in ``path``'s ``section``; None when the file is not
    pytest's (absent, or without the section where that decides)."""
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error) as e:
        raise UsageError(f"{path.name}: cannot be read ({str(e).splitlines()[0]})") from None
    if not parser.has_section(section):
        return [] if required else None
    return parser.get(section, "afdb_declare", fallback="").splitlines()


def merge(files: Iterable[str], command_line: Sequence[str]) -> list[str]:
    """File lines, less those of the Functions the command line declares, then the command
    line's (identical file lines once)."""
    given = {_target(line) for line in command_line}
    out: list[str] = []
    for line in files:
        text = line.split("#", 1)[0].strip()
        if text and _target(text) not in given and text not in out:
            out.append(text)
    return out + [line for line in command_line if line.split("#", 1)[0].strip()]


def _target(line: str) -> str:
    words = line.split("#", 1)[0].split()
    return words[0] if words else ""


def declaration_lines(
    command_line: Sequence[str] = (),
    *,
    folder: str | Path | None = None,
    ini: Sequence[str] | None = None,
) -> list[str]:
    """Every declaration line that applies: ``[tool.afdb]`` and the ini option of the
    project in ``folder`` (default: the working directory; ``ini``: the ini lines pytest
    read, instead of looking for them), then the command line's."""
    where = Path(folder) if folder is not None else Path.cwd()
    files = tool_lines(where) + list(ini_lines(where) if ini is None else ini)
    return merge(files, list(command_line))


__all__ = ["declaration_lines", "ini_lines", "merge", "tool_lines"]
