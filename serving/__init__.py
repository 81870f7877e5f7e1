"""Serving: export to SavedModel and CTranslate2, the TF-Serving-compatible server, the client."""

import model  # noqa: F401  (first: TensorFlow without its start-up notices; model/_startup.py)
