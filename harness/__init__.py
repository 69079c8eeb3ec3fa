"""cood-bench harness: evaluate a classifier and its confidence functions on a C-OOD benchmark."""

__version__ = "0.1.0"
