"""Dev BLEU during training: greedy translations of the dev split, the best checkpoint, patience.

At every checkpoint the training loop translates the first `dev_bleu_sentences` dev sentences
(of each corpus, in a run on several: the best and patience follow the plain mean of their BLEU,
over the corpora whose references BLEU can measure, `measures_bleu`)
with greedy decoding through `model.translator.Translator` (the path the export serves), scores
them with sacreBLEU, and keeps the model weights of the best dev BLEU so far in
`<run_dir>/best/` (a model-only checkpoint, with `best.json`). With `early_stopping_patience` P > 0,
training stops after P evaluations in a row without a better BLEU.

The translate function is traced once (a `[None]` string input signature) and reused at every
evaluation; it reads the model's variables as they are, so it always scores the current weights.
"""

import json
import os

import tensorflow as tf

from common.serving_contract import TRANSLATION_OUTPUT
from model.files import write_atomically
from model.translator import DecodingOptions, Translator, traced
from run_directory.artifacts import BEST_INFO_FILE
from training.evaluate import BATCH_SIZE, describe_decoding, score, translate

# BLEU's longest n-gram. A corpus whose references are nearly all shorter (a lexicon's words
# and short phrases) scores BLEU 0 at one checkpoint and, when a few outputs run long, tens of
# points at the next, by chance: it would choose the best checkpoint of a mixed run. Short
# prompts among sentences (a telephony corpus's digits) leave BLEU meaningful.
BLEU_MAX_ORDER = 4
MIN_SHARE_OF_LONG_REFERENCES = 0.1


def measures_bleu(pairs):
    """Whether BLEU means something on `pairs`' references: at least
    `MIN_SHARE_OF_LONG_REFERENCES` of them hold `BLEU_MAX_ORDER` words."""
    long_enough = sum(len(target.split()) >= BLEU_MAX_ORDER for _, target in pairs)
    return long_enough >= MIN_SHARE_OF_LONG_REFERENCES * len(pairs)


class DevBleu:
    """Scores the current weights on a fixed, bounded set of dev sentences.

    Args:
        model: the `Transformer` being trained.
        source_tokenizer, target_tokenizer: the run's tokenizers.
        pairs: dev `(source, target)` pairs, the first `max_sentences` used; or, for a run on
            several corpora, `{corpus name: dev pairs}`, the first `max_sentences` of each.
        max_sentences: int > 0.
        batch_size: sentences per decoding call (`training.evaluate`'s, so that the scores agree).
        options: the run's `DecodingOptions` (`run_directory.artifacts.decoding_options`), of
            which greedy search follows the rules of each step's choice (repetition controls,
            placeholder limits), as `training.evaluate`'s greedy search of the run does.

    Attributes:
        decoding: how it decodes, for reports ("greedy, no_repeat_ngram_size 3").
        bleu_corpora: the corpora whose BLEU the mean takes (`measures_bleu`; all of them
            where none does).
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        pairs,
        max_sentences,
        batch_size=BATCH_SIZE,
        options=DecodingOptions(),
    ):
        if max_sentences < 1:
            raise ValueError(f"max_sentences must be positive, got {max_sentences}.")
        translator = Translator(model, source_tokenizer, target_tokenizer, options)
        self.decoding = describe_decoding(options, beam_width=1)
        self._greedy = traced(translator.greedy, tf.TensorSpec([None], tf.string))
        self.corpora = {
            name: list(corpus_pairs)[:max_sentences]
            for name, corpus_pairs in (
                pairs.items() if isinstance(pairs, dict) else [(None, pairs)]
            )
        }
        self.sources = [source for chosen in self.corpora.values() for source, _ in chosen]
        self.bleu_corpora = [
            name for name, chosen in self.corpora.items() if measures_bleu(chosen)
        ] or list(self.corpora)
        self.batch_size = batch_size

    def _score(self, pairs, known):
        key = tuple(pairs)
        if known is not None and key in known:
            return known[key]
        hypotheses = translate(
            [source for source, _ in pairs],
            lambda text: self._greedy(text)[TRANSLATION_OUTPUT],
            self.batch_size,
            show_progress=False,
        )
        result = score(hypotheses, [target for _, target in pairs])
        if known is not None:
            known[key] = result
        return result

    def __call__(self, known=None):
        """`{"bleu", "chrf", ...}` of the current weights (see `training.evaluate.score`); for
        several corpora `{"bleu", "chrf", "corpora": {name: {"bleu", "chrf", ...}}}`, "bleu" the
        plain mean of the `bleu_corpora`'s, "chrf" of every corpus's.

        Args:
            known: None, or `{tuple of pairs: score}` of these same weights decoded the same
                way, which another `DevBleu` filled in this measurement (a fine-tuning run's own
                dev set and its watch of the base's hold the same corpora): pairs scored there
                are not translated again, and what this call scores is added to it.
        """
        if None in self.corpora:
            return self._score(self.corpora[None], known)
        scores = {name: self._score(pairs, known) for name, pairs in self.corpora.items()}
        return {
            "bleu": sum(scores[name]["bleu"] for name in self.bleu_corpora)
            / len(self.bleu_corpora),
            "chrf": sum(result["chrf"] for result in scores.values()) / len(scores),
            "corpora": scores,
        }


class BestCheckpoint:
    """The weights of the best dev BLEU so far, and the evaluations since it improved.

    State lives in `<directory>/best.json` next to the checkpoint, so a resumed run goes on
    counting where it stopped.

    Args:
        model: the model whose weights are saved.
        directory: where the checkpoint and `best.json` go (created).
    """

    def __init__(self, model, directory):
        self.directory = directory
        self._manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model), directory, max_to_keep=1, checkpoint_name="best"
        )
        self.info_path = os.path.join(directory, BEST_INFO_FILE)
        self.state = {
            "step": None,
            "bleu": None,
            "chrf": None,
            "evaluations_without_improvement": 0,
        }
        if os.path.exists(self.info_path):
            with open(self.info_path, encoding="utf-8") as info_file:
                self.state = json.load(info_file)

    def update(self, step, result):
        """Records the dev `result` of `step`; saves the weights when BLEU improved.

        Returns:
            bool, whether this evaluation is the new best.
        """
        improved = self.state["bleu"] is None or result["bleu"] > self.state["bleu"]
        if improved:
            path = self._manager.save(checkpoint_number=step)
            self.state = {
                "step": step,
                "bleu": result["bleu"],
                "chrf": result["chrf"],
                "checkpoint": os.path.basename(path),
                "evaluations_without_improvement": 0,
            }
            if "corpora" in result:
                self.state["corpora"] = {
                    name: {"bleu": scores["bleu"], "chrf": scores["chrf"]}
                    for name, scores in result["corpora"].items()
                }
        else:
            self.state["evaluations_without_improvement"] += 1
        write_atomically(self.info_path, json.dumps(self.state, indent=2))
        return improved

    def should_stop(self, patience):
        """True when `patience` > 0 evaluations in a row did not improve the best BLEU."""
        return patience > 0 and self.state["evaluations_without_improvement"] >= patience
