"""The models the decoding tests decode with."""

import keras
import numpy as np
import pytest

from model import Transformer
from tests.reverse_task import reverse_task


@pytest.fixture(scope="module")
def sources():
    """A held-out batch with different source lengths (4..8 tokens, padded)."""
    source, _, labels = reverse_task(np.random.default_rng(7), 24)
    return source, labels


@pytest.fixture(scope="module")
def untrained_model():
    model = Transformer(2, 32, 4, 64, 30, 30, 80, 80)
    return model


@pytest.fixture(scope="session")
def half_trained_model():
    """The reverse task after 60 training steps: every output ends with [END], but the model is
    unsure enough that beam search and greedy decoding often disagree (an untrained model never
    ends a sentence; a fully trained one is certain)."""
    from tests.reverse_task import train_reverse_model

    keras.utils.set_random_seed(0)
    return train_reverse_model(steps=60)[0]
