"""benchmarks/sweep_recipe.py: the sweep table."""


def test_sweep_table_adds_the_perturbed_dev_columns_when_every_point_has_them():
    from benchmarks.sweep_recipe import markdown

    result = {
        "name": "source_noise=0.1",
        "settings": {"source_noise": 0.1},
        "steps": 10,
        "minutes": 1,
        "cpus": "all",
        "bleu_signature": "sig",
        "test_bleu": 5.0,
        "test_chrf": 20.0,
        "dev_curve": [(1.0, 10, 4.0)],
    }
    assert "dev BLEU perturbed" not in markdown([result], "cmd", "plot.png", "small")
    robust = {**result, "dev_bleu": 4.5, "dev_bleu_perturbed": 3.25, "dev_looping": 0.125}
    assert "| 5.00 | 20.00 | 4.00 | 4.50 | 3.25 | 12.5% |" in markdown(
        [robust], "cmd", "plot.png", "small"
    )
