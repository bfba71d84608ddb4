"""``afdb migrate``: a legacy ``forward(ctx, ...)`` Function rewritten to the torch.func style
(``forward(*args)`` + ``setup_context``), verified against the original before it is written.

* ``names``: which names a piece of syntax reads and binds (the codemod's data flow).
* ``statements``: which statements of ``forward`` are ctx work, which intermediates are exact
  and cheap to compute again.
* ``codemod``: the rewrite on libcst's concrete syntax tree (everything outside the rewritten
  class byte for byte), or a one-line refusal.
* ``loading``: the original and the rewritten source as modules (a file inside a package as
  part of its package; the rewritten one from a temporary file, never the user's).
* ``verify``: the migrated class against the original on samples (forward, eager gradients,
  double backward, at float64 and at the samples' dtype).
* ``vmaprule``: what in ``forward`` prevents ``generate_vmap_rule = True``.
* ``run``: one target end to end (find, rewrite, verify, torch.func checks, write).

Sits beside ``certify`` on top of the Python API: may import ``api``, ``targets``,
``entries``, ``checks``, ``core`` and the registry; only ``cli`` imports it.
"""
