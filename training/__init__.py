"""Training: data, vocabulary, the training loop, averaging, evaluation, bundling."""

import model  # noqa: F401  (first: TensorFlow without its start-up notices; common/startup.py)
