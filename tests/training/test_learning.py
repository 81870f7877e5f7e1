"""The model learns: a tiny Transformer masters reversing random token sequences."""

import numpy as np

from tests.reverse_task import reverse_task


def test_tiny_transformer_learns_to_reverse_sequences(trained_reverse_model):
    model, initial_loss = trained_reverse_model
    source, decoder_input, labels = reverse_task(np.random.default_rng(99), 1_000)
    loss, accuracy = model.evaluate((source, decoder_input), labels, verbose=0)
    assert accuracy >= 0.95, f"held-out token accuracy {accuracy:.3f}"
    assert loss < initial_loss / 10
