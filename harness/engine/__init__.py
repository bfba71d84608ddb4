"""Running cases: enumerate them, run each in isolation, in this process or in workers.

Owns, in the order an entry goes through a run: its samples, drawn once per run
(``sample_cache``); its cases and their ids (``cases``); running one case and many
(``runner``), with global-state isolation and time limits (``isolation``, ``case_state``,
``deadline``), leftover child processes (``children``), whose exception it is (``blame``,
``refusals``) and which staticmethod hung (``hangs``, ``timeouts``); the one place records
are built and the ``afdb repro`` command they carry (``records``). Workers: how many
(``cores``), which process model (``fork_safety``), the pool itself (``parallel`` choosing
between ``forkpool`` forked workers and ``xdist_pool`` fresh pytest-xdist interpreters),
with ``warmup``, ``probe`` and ``entry_progress``; shards (``shard``) and run metadata
(``metadata``).

May import: ``harness.checks``, ``harness.plans``, ``harness.core``, ``autograd_function_db``.
Nothing above it (no CLI, sources, reports or pytest plugin); the one exception is text, not
an import: the test module ``xdist_pool.generated_test_module`` writes for pytest workers
names the pytest plugin's ``config_tests``.
"""
