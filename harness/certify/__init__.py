"""Backend certification: backends (``backends``), their check areas (``checks``: cross-backend
and torch.compile) and the verifiable certificate (``certificate``).

Sits on top of the engine and the Python API. May import every wing below it; nothing
below imports it.
"""
