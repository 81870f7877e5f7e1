"""benchmarks/bench_tokenizer.py: losslessness measured against sacreBLEU."""

import pytest


def test_bench_tokenizer_measures_losslessness_against_sacrebleu():
    from benchmarks.bench_tokenizer import learn, measure

    texts = [
        "El niño come pan.",
        "The boy eats bread.",
        "¿Dónde está? 3,5 euros",
        "A - B, 1, 2",
    ] * 30
    references = ["The boy eats bread.", "A - B, 1, 2", "don't  stop"]
    sentencepiece, _ = learn("unigram", texts, 300, lower_case=False)
    lossless = measure(sentencepiece, texts, references, lower_case=False)
    assert lossless["exact"] == 1.0 and lossless["tokens per sentence"] > 2
    # "don't  stop" comes back with one space: BLEU's 13a tokenization does not see it.
    assert lossless["bleu"] == pytest.approx(100.0) and lossless["chrf"] == pytest.approx(100.0)
    wordpiece, _ = learn("wordpiece", texts, 300, lower_case=False)
    lossy = measure(wordpiece, texts, references, lower_case=False)
    assert lossy["exact"] < 0.5 and lossy["chrf"] < 100.0
