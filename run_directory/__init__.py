"""A training run directory: its layout and settings, and loading a trained translator from it.

Below `training` (which writes runs) and `serving` (whose offline tools export and translate
from them), above `model`: `run_directory.artifacts` holds the layout and the loading,
`run_directory.settings` the compatibility of settings saved by older runs.
"""
