"""pytest plugin for autograd-function-db (conformance cases as pytest items)."""
