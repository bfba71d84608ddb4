"""Where ``pytest --afdb`` keeps its verdicts: a folder of pytest's own cache.

pytest's cache provider (``config.cache``, ``.pytest_cache`` or the project's
``cache_dir``) gives the folder, so ``--cache-clear`` starts afresh as it does for
``--last-failed``; ``--afdb-cache-clear`` empties only the verdicts; ``-p no:cacheprovider``
turns the cache off (every Function is checked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The folder's name under the cache's ``d/`` (``config.cache.mkdir``).
FOLDER = "afdb-verdicts"
CLEAR_HINT = "--afdb-cache-clear checks every Function afresh"


def verdict_store(config: Any) -> Any:
    """The session's ``VerdictStore`` (emptied first with ``--afdb-cache-clear``), or None
    when pytest's cache provider is off."""
    from harness.session.verdict_cache import VerdictStore

    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    try:
        folder = Path(cache.mkdir(FOLDER))
    except OSError:
        return None
    try:
        shown = folder.relative_to(Path(config.rootpath)).as_posix()
    except ValueError:  # a cache_dir outside the project: its own name only
        shown = f".../{folder.parent.name}/{folder.name}"
    store = VerdictStore(folder, shown, CLEAR_HINT)
    if config.getoption("afdb_cache_clear", False):
        store.clear()
    return store


__all__ = ["verdict_store"]
