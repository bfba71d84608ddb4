"""The core: what every layer shares and nothing in it depends on a layer above.

Owns: the errors every layer raises (``errors``), run options (``options``), case and run
results and their JSON form (``results``), text from a Function made safe to keep
(``textsafe``), portable source locations (``locations``), safe reading of input files and
choice of write targets (``safe_io``), schema validation of every file the suite reads back
(``schema``), where the suite's own files live (``paths``), and the guarded routes around
torch's first-use imports (``dynamo_shim``, ``grads_shim``, each a ``patching.GuardedPatch``,
installed and forbidden together by ``shims``), the import that keeps torch's own
deprecation warnings from the user (``torch_warnings``), and the dtype names the command
line takes without torch (``dtype_names``).

May import: torch, the standard library, ``jsonschema``; nothing else of ``harness``.
"""
