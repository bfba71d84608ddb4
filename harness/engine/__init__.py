"""Running cases: enumerate them, run each in isolation, in this process or in workers.

Owns: cases, their ids and the one place records are built (``cases``), running one case
and many (``runner``), worker pools (``parallel`` through pytest-xdist, ``forkpool``
forked), global-state isolation and time limits (``isolation``, ``case_state``), leftover
child processes (``children``), whose exception it is (``blame``), shards (``shard``) and
run metadata (``metadata``).

May import: ``harness.checks``, ``harness.plans``, ``harness.core``, ``autograd_function_db``.
"""
