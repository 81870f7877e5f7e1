"""Many sentences through one translation signature, in batches of similar length: how
`inference.translate_text` translates a file, and how `training.corpus.own_backtranslation`
translates WordNet's examples with a reversed run.

The sentences are sorted by length into batches of at most `BATCH_TOKENS` padded source tokens
(estimated from the characters: the signature does not expose its tokenizer) and
`MAX_BATCH_SENTENCES` sentences. A batch decodes up to a length bound set by its longest
source, so a translation that never ends is cut where its batch says: two callers give the same
translations when they batch the same sentences with the same limits.
"""

import math

import tensorflow as tf

from common.serving_contract import (
    SCORE_OUTPUT,
    SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)

# Large batches: on a file of short everyday sentences 64 sentences were the binding limit,
# and larger ones translated faster with the same output (docs/benchmark-log.md, translate-text's
# batch limits).
BATCH_TOKENS = 8192
MAX_BATCH_SENTENCES = 512
# Characters per subword token of the bundled model's source tokenizer on its test split; a
# batch's padded size is estimated with it before tokenizing (the export does not expose its
# tokenizer).
CHARACTERS_PER_TOKEN = 3.6


def estimated_tokens(text):
    """Source tokens of `text` with [START] and [END], estimated from its characters."""
    return math.ceil(len(text) / CHARACTERS_PER_TOKEN) + 2


def length_batches(sources, batch_tokens=BATCH_TOKENS, max_batch_sentences=MAX_BATCH_SENTENCES):
    """Indices of `sources` in batches, shortest first (stable in input order, as
    `training.evaluate.translate` sorts): each batch holds at most `max_batch_sentences`, and its
    size times its longest source's `estimated_tokens` is at most `batch_tokens` unless it holds
    one sentence."""
    batch = []
    for index in sorted(range(len(sources)), key=lambda index: len(sources[index])):
        padded = (len(batch) + 1) * estimated_tokens(sources[index])
        if batch and (len(batch) == max_batch_sentences or padded > batch_tokens):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def translate_window(
    sources,
    signature,
    batch_tokens=BATCH_TOKENS,
    max_batch_sentences=MAX_BATCH_SENTENCES,
    progress=None,
):
    """Per source, its hypotheses `[(translation, score), ...]` (best first), or None for a
    blank source (not translated).

    Args:
        sources: list of str.
        signature: `[batch]` tf.string → the dict of a signature's outputs (`translation` and
            `score`, or `translations` and `scores` of the n_best signature), as
            `run_directory.traced_cache.load_or_trace` and `training.evaluate.export_signature`
            give it.
        progress: None, or called with the number of sources of each batch once it is
            translated (a tqdm bar's `update`).
    """
    results = [None] * len(sources)
    nonblank = [row for row, source in enumerate(sources) if source.strip()]
    texts = [sources[row] for row in nonblank]
    for batch in length_batches(texts, batch_tokens, max_batch_sentences):
        outputs = signature(tf.constant([texts[index] for index in batch], tf.string))
        if TRANSLATIONS_OUTPUT in outputs:
            translations = outputs[TRANSLATIONS_OUTPUT].numpy()
            scores = outputs[SCORES_OUTPUT].numpy()
        else:
            translations = outputs[TRANSLATION_OUTPUT].numpy()[:, None]
            scores = outputs[SCORE_OUTPUT].numpy()[:, None]
        for index, row_translations, row_scores in zip(batch, translations, scores):
            results[nonblank[index]] = [
                (translation.decode("utf-8"), float(score))
                for translation, score in zip(row_translations, row_scores)
            ]
        if progress is not None:
            progress(len(batch))
    return results
