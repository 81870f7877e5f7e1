"""Parallel corpora: where the training pairs come from.

One concern per module, each importing only the ones listed before it:

* `tsv`: the `source<TAB>target` file format, and `CorpusError`.
* `splitting`: deterministic train/dev/test splits by hash; deduplication.
* `osis`: OSIS markup of a SWORD Bible module to plain text (and the RV1909's quirks).
* `alignment`: length-based verse alignment (Gale & Church) and the mismatches it finds.
* `outputs`: a built corpus directory (`stats.json` written last) and when to build it.
* `debian`: `apt-get download` into a cache and unpack without installing.
* `bible`: downloads and builds the embedded Spanish->English Bible corpus
  (command line: `python -m training.prepare_data`).
* `fill_values`: the values placeholders are filled with, written in English and Spanish.
* `catalog_fills`: a message-catalog entry's placeholders filled alike on both sides.
* `catalog_cleaning`: the rules that make message-catalog entries sentence pairs.
* `apertium`: Apertium, Debian's rule-based translator, as a tool.
* `backtranslation`: builds WordNet's usage examples back-translated by Apertium
  (`python -m training.prepare_data --corpus wordnet-bt`).
* `lexicon`: builds FreeDict's and Apertium's word pairs
  (`python -m training.prepare_data --corpus lexicon`).
* `telephony`: builds Asterisk's voice prompts, a domain to fine-tune to
  (`python -m training.prepare_data --corpus telephony`).
* `catalogs`: builds the corpus of Debian's Spanish message catalogs
  (`python -m training.prepare_data --corpus catalogs`).
* `catalog_fills_corpus`: builds the corpus of the catalogs' messages with placeholders, filled,
  apart from the catalogs corpus (`python -m training.prepare_data --corpus catalog-fills`).
* `loading`: `load_pairs(source_spec, split)`, the one entry point of the trainer; the
  spelling a corpus records (`corpus_source_spelling`) and a run's view of it (`load_run_pairs`:
  its spelling, and its direction, `run_languages`).
* `own_backtranslation`: builds WordNet's usage examples back-translated by an English→Spanish
  run of this project (`python -m training.prepare_data --corpus wordnet-bt-own
  --backtranslator RUN_DIR`); it translates through `training.evaluate`, which imports this
  package, so nothing here imports it.

The entry point and its error are importable from the package itself:
`from training.corpus import CorpusError, load_pairs`.
"""

from training.corpus.loading import (
    corpus_is_at_hand,
    corpus_source_spelling,
    load_pairs,
    load_run_pairs,
    run_languages,
)
from training.corpus.tsv import CorpusError

__all__ = [
    "CorpusError",
    "corpus_is_at_hand",
    "corpus_source_spelling",
    "load_pairs",
    "load_run_pairs",
    "run_languages",
]
