"""CustomSchedule against the paper's formula, and the paper's Adam settings."""

import keras
import numpy as np
import pytest

from training.schedule import CustomSchedule, paper_adam


@pytest.mark.parametrize("d_model, warmup", [(512, 4000), (128, 1000), (64, 50)])
def test_matches_formula(d_model, warmup):
    schedule = CustomSchedule(d_model, warmup_steps=warmup)
    steps = np.array([0, 1, warmup // 2, warmup - 1, warmup, 3 * warmup, 100_000])
    step_num = steps + 1.0
    expected = d_model**-0.5 * np.minimum(step_num**-0.5, step_num * warmup**-1.5)
    np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-6)


def test_peak_at_end_of_warmup():
    schedule = CustomSchedule(512, warmup_steps=4000)
    rates = np.array([float(schedule(s)) for s in range(0, 20000, 50)])
    assert abs(int(np.argmax(rates)) * 50 - 3999) <= 50
    np.testing.assert_allclose(rates.max(), (512 * 4000) ** -0.5, rtol=1e-2)


def test_first_update_has_nonzero_rate():
    assert float(CustomSchedule(512)(0)) > 0.0


def test_serialization_and_optimizer():
    schedule = CustomSchedule(256, warmup_steps=300, scale=2.0)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert float(restored(10)) == pytest.approx(float(schedule(10)))
    optimizer = paper_adam(schedule)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


def test_rejects_nonpositive_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        CustomSchedule(512, warmup_steps=0)
