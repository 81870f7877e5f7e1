"""How a source tokenizer may normalize the case of its input (a run's "source_casing").

The tokenizer (`model.tokenizer.Tokenizer.casing`) and the placeholders
(`model.placeholders.Placeholders`), which must see a source as the model does, share it.
"""

import tensorflow as tf

# How a source tokenizer may normalize the case of its input (a run's "source_casing"):
# "lower" lowercases every source; "lower_all_caps" lowercases only a source written in capitals
# ("DIOS ES AMOR"), which a model trained on running text has barely seen, and keeps the case
# of every other (names, sentence starts), which carries meaning.
SOURCE_CASINGS = ("lower", "lower_all_caps")


def normalize_casing(strings, casing):
    """`strings` (`tf.string`, any shape) with their case normalized as `casing` says."""
    if casing not in SOURCE_CASINGS:
        raise ValueError(f"casing must be one of {SOURCE_CASINGS}, got {casing!r}.")
    lowered = tf.strings.lower(strings, encoding="utf-8")
    if casing == "lower":
        return lowered
    all_caps = tf.strings.regex_full_match(strings, r"(?s)[^\p{Ll}]*\p{Lu}[^\p{Ll}]*")
    return tf.where(all_caps, lowered, strings)
