"""Subword tokenizers that run inside the graph: SentencePiece (the default) and WordPiece.

Both wrap keras-hub's tokenizers (`keras_hub.tokenizers.SentencePieceTokenizer` and
`WordPieceTokenizer`, with tensorflow-text's ops underneath, which TensorFlow Serving links), so the
same code tokenizes in the training input pipeline, in evaluation, inside the exported SavedModel
and in the notebooks. They turn text into `[START] pieces... [END]` id sequences and back.

Reserved ids are the same for every tokenizer and every vocabulary: `[PAD]=0, [UNK]=1, [START]=2,
[END]=3` (`model.special_tokens`).

SentencePiece is lossless: `detokenize(tokenize(s)) == normalize(s)` for every string `s`, where
`normalize` is the one normalization the tokenizer applies (NFKC, optionally case-folded; runs of spaces squeezed to one;
U+2581 "▁", SentencePiece's word marker, read as a space; spaces at either end removed). Thanks to byte fallback no character is ever [UNK]: a character outside
the vocabulary is spelled as its UTF-8 bytes. The pieces mark the start of a word with "▁".

WordPiece (the classic tutorial's tokenizer) splits on whitespace and punctuation and joins the
pieces back with single spaces, so it loses the original spacing ("¿Dónde?" comes back as
"¿ Dónde ?"). It is kept for users who want it; use SentencePiece to report BLEU.

A tokenizer directory (`training.vocabulary.build_tokenizers` writes one, `load_tokenizers` reads
it) holds `tokenizer_config.json` and, per vocabulary, `spm.{shared,src,tgt}.model` (SentencePiece
model protos) or `vocab.{shared,src,tgt}.txt` (WordPiece, one token per line, line number = id).

A run trained on a corpus in modern Spanish spelling records `"source_spelling": "modern"` in
`tokenizer_config.json`; its source tokenizer then rewrites 1909 spellings ("á", "fué", "crió")
in the graph before the subword model (`model.spelling.modernize_graph`), so export, evaluation and
the notebooks all read old-spelled input as the modern text the run learned. Without the key
(runs trained on the 1909 spelling) the input is tokenized as it is.

A run trained with `--placeholders` records `"placeholders": true` and keeps `known_words.txt`
(the keys of its training sources' words) beside its vocabulary, which holds the placeholder
markers as pieces (`model.placeholders`).

In an exported SavedModel the graph holds tensorflow-text ops (`SentencepieceOp`,
`SentencepieceTokenizeOp`, `SentencepieceDetokenizeOp`, `FastWordpieceTokenizeWithOffsets`, ...):
TF Serving's model server links them; a plain Python process must `import tensorflow_text` before
loading the SavedModel (the stock `saved_model_cli run` does not, see `tests/inference/test_export.py`). The
SentencePiece op holds the model as a resource: export it with `archive.track(tokenizer)`.
"""

import hashlib
import json
import os
import unicodedata

import keras_hub
import tensorflow as tf
from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

from model.casing import SOURCE_CASINGS, normalize_casing
from model.files import write_atomically
from model.placeholders import Placeholders
from model.restoration import Restoration
from model.special_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from model.spelling import MODERN, modernize_graph
from model.word_repair import REPAIR_WORDS_KEY, WordRepair

CONFIG_FILE = "tokenizer_config.json"
# The config's keys of a source tokenizer's restorations, in `Restoration.from_directory`'s order.
RESTORATION_KEYS = ("restore_accents", "restore_case", "restore_names")
TOKENIZER_TYPES = ("sentencepiece", "wordpiece")
# Version 1 (no "format_version") was the hand-written WordPiece tokenizer of earlier releases.
FORMAT_VERSION = 2
SENTENCEPIECE_WORD_MARKER = "\u2581"


def model_file(tokenizer_type, side):
    """The file name of one vocabulary: `side` is "shared", "src" or "tgt"."""
    if tokenizer_type == "sentencepiece":
        return f"spm.{side}.model"
    return f"vocab.{side}.txt"


def normalize(text, lower_case=False):
    """The normalization SentencePiece applies, in Python: the reference for its losslessness.

    NFKC (then, when lowercasing, case folding and NFKC again: the trainer's `nfkc_cf` rule); runs
    of spaces squeezed to one; then each U+2581 ("▁", the word marker) read as a space, and spaces
    at either end removed. Only U+0020 counts as a space here (NFKC maps the other Unicode spaces
    to it); tabs and newlines are kept as they are.

    Args:
        text: str.
        lower_case: bool, whether the tokenizer lowercases.

    Returns:
        str, what `detokenize(tokenize(text))` returns.
    """
    text = unicodedata.normalize("NFKC", text)
    if lower_case:
        text = unicodedata.normalize("NFKC", text.casefold())
    text = " ".join(word for word in text.split(" ") if word)
    return text.replace(SENTENCEPIECE_WORD_MARKER, " ").strip(" ")


class Tokenizer(tf.Module):
    """Strings <-> `[START] pieces... [END]` id sequences, in the graph (base class).

    Subclasses wrap one keras-hub tokenizer (`self.subword_tokenizer`) and define how kept pieces
    join back into text (`_join`). `spelling="modern"` (`model.spelling.MODERN`) modernizes the
    input before tokenizing it (a source tokenizer, see the module docstring); None leaves it.

    `restoration` is the `model.restoration.Restoration` of a source tokenizer whose run puts
    accents and capitals back on sources typed without them (`load_tokenizers` sets it):
    `tokenize` applies it after modernizing the spelling and normalizing the case. None leaves
    the input as typed.

    `placeholders` is the `model.placeholders.Placeholders` of a source tokenizer whose run
    protects numbers and unknown names (`load_tokenizers` sets it), else None. The tokenizer
    does not apply it: the `model.translator.Translator` protects a source before tokenizing it
    and restores the words after detokenizing, since it holds both sides.

    `word_repair` is the `model.word_repair.WordRepair` of a target tokenizer whose run replaces
    made-up words (`load_tokenizers` sets it), else None; the Translator applies it, which holds
    the alignments it needs.
    """

    def __init__(self, subword_tokenizer, lower_case=False, spelling=None, name=None, casing=None):
        super().__init__(name=name)
        if spelling not in (None, MODERN):
            raise ValueError(f"spelling must be None or {MODERN!r}, got {spelling!r}.")
        if casing not in (None, *SOURCE_CASINGS):
            raise ValueError(f"casing must be None or one of {SOURCE_CASINGS}, got {casing!r}.")
        self.subword_tokenizer = subword_tokenizer
        self._lower_case = lower_case
        self._spelling = spelling
        self._casing = casing
        self.restoration = None
        self.placeholders = None
        self.word_repair = None
        self._vocab = list(subword_tokenizer.get_vocabulary())
        if tuple(self._vocab[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"The vocabulary must start with the reserved tokens {list(RESERVED_TOKENS)}, "
                f"found {self._vocab[: len(RESERVED_TOKENS)]}."
            )
        # A constant, not a lookup table: id -> piece needs nothing initialized when served.
        self._vocab_strings = tf.constant(self._vocab, dtype=tf.string)

    @property
    def vocab(self):
        """list of str, a copy of the vocabulary (index = id)."""
        return list(self._vocab)

    @property
    def vocab_size(self):
        """int, number of tokens, reserved ones included."""
        return len(self._vocab)

    @property
    def lower_case(self):
        return self._lower_case

    @property
    def spelling(self):
        return self._spelling

    @property
    def casing(self):
        """How `tokenize` normalizes the case of its input first (`normalize_casing`), or None.
        A source-only setting: the vocabulary, shared or not, keeps its case, and so does
        `detokenize`."""
        return self._casing

    # Without AutoGraph, as `model.translator.traced`: the branches are on Python settings.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """Tokenizes strings into `[START] pieces... [END]` ids.

        Args:
            strings: `tf.string` tensor, shape `[batch]`, UTF-8.

        Returns:
            `tf.RaggedTensor` of int64, shape `[batch, (tokens)]`; an empty string gives
            `[START_ID, END_ID]`.
        """
        return self._tokenize(strings, self.subword_tokenizer.tokenize)

    def sampling_tokenize(self, nbest_size, alpha):
        """A `tokenize` that samples a segmentation per call (subword regularization).

        For training only: decoding, evaluation and exports use the deterministic `tokenize`.

        Raises:
            ValueError: this tokenizer cannot sample (only SentencePiece can).
        """
        raise ValueError(f"{type(self).__name__} cannot sample segmentations; use SentencePiece")

    def _tokenize(self, strings, subword_tokenize):
        if self._spelling == MODERN:
            strings = modernize_graph(strings)
        if self._casing is not None:
            strings = normalize_casing(strings, self._casing)
        if self.restoration is not None:
            strings = self.restoration(strings)
        ids = tf.cast(subword_tokenize(strings), tf.int64)
        edge_shape = tf.stack([ids.nrows(), 1])
        starts = tf.fill(edge_shape, tf.constant(START_ID, tf.int64))
        ends = tf.fill(edge_shape, tf.constant(END_ID, tf.int64))
        return tf.concat([starts, ids, ends], axis=1)

    @tf.function(autograph=False)
    def detokenize(self, ids):
        """Turns id sequences back into text.

        Ids after the first [END] are ignored and reserved ids are dropped; the rest join as the
        tokenizer joins them (see the module docstring). Traced once per input type (dense or
        ragged, int32 or int64).

        Args:
            ids: integer tensor `[batch, length]` (padded with `PAD_ID`, or `[END]`-terminated
                followed by anything) or `tf.RaggedTensor` `[batch, (length)]`.

        Returns:
            `tf.string` tensor, shape `[batch]`.
        """
        ids = _dense_ids(ids)
        after_end = tf.cumsum(tf.cast(tf.equal(ids, END_ID), tf.int32), axis=1) > 0
        is_piece = (ids >= len(RESERVED_TOKENS)) & (ids < self.vocab_size)
        return self._join(tf.ragged.boolean_mask(ids, is_piece & ~after_end))

    @tf.function(autograph=False)
    def lookup(self, ids):
        """Maps ids to their pieces (e.g. for attention plots).

        Args:
            ids: integer tensor or `tf.RaggedTensor` of any shape.

        Returns:
            `tf.string` tensor (ragged if `ids` is) of the same shape; ids outside
            `[0, vocab_size)` give "[UNK]".
        """

        def lookup_flat(flat_ids):
            flat_ids = tf.cast(flat_ids, tf.int64)
            valid = (flat_ids >= 0) & (flat_ids < self.vocab_size)
            flat_ids = tf.where(valid, flat_ids, tf.constant(UNK_ID, tf.int64))
            return tf.gather(self._vocab_strings, flat_ids)

        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(lookup_flat, ids)
        return lookup_flat(ids)

    @tf.function(input_signature=[], autograph=False)
    def get_vocab_size(self):
        """Returns the vocabulary size as an int32 scalar tensor."""
        return tf.constant(self.vocab_size, tf.int32)

    def _join(self, ids):
        return self.subword_tokenizer.detokenize(ids)


class SentencePieceTokenizer(Tokenizer):
    """Lossless SentencePiece tokenizer (see the module docstring).

    Args:
        proto: bytes, a serialized SentencePiece model whose first pieces are `RESERVED_TOKENS`
            (as `training.vocabulary.learn_sentencepiece` writes).
        lower_case: bool, recorded for `normalize`; the lowercasing itself is in the model's
            normalization rule.
        spelling: None, or "modern" to modernize the input first (see `Tokenizer`).
        name: optional module name.

    Example:

    >>> tokenizer = SentencePieceTokenizer(proto)
    >>> ids = tokenizer.tokenize(["¿Dónde está?"])  # ragged int64 [1, (n)]
    >>> tokenizer.detokenize(ids)  # tf.string [1]: "¿Dónde está?" in UTF-8
    """

    def __init__(self, proto, lower_case=False, spelling=None, name=None, casing=None):
        self.proto = bytes(proto)
        subword_tokenizer = keras_hub.tokenizers.SentencePieceTokenizer(
            proto=self.proto, dtype="int32"
        )
        self._model = _SharedSentencePieceModel(self.proto)
        subword_tokenizer._sentence_piece._model_resource = self._model
        super().__init__(
            subword_tokenizer,
            lower_case=lower_case,
            spelling=spelling,
            name=name,
            casing=casing,
        )

    @classmethod
    def from_file(cls, path, lower_case=False, spelling=None, casing=None):
        with open(path, "rb") as model_file:
            return cls(model_file.read(), lower_case=lower_case, spelling=spelling, casing=casing)

    def sampling_tokenize(self, nbest_size, alpha):
        """A `tokenize` that samples each segmentation (Kudo 2018), for training only.

        Args:
            nbest_size: SentencePiece's: < 0 samples from every segmentation (forward-filtering
                backward-sampling), > 1 from the `nbest_size` best; 0 and 1 do not sample.
            alpha: the smoothing exponent of the sampling distribution, P(x)^alpha.

        Returns:
            a function of a `tf.string` `[batch]` tensor with `tokenize`'s contract. Its draws
            come from SentencePiece's own generator, which takes no seed: they differ between
            runs.
        """

        def subword_tokenize(strings):
            values, row_splits = gen_sentencepiece_tokenizer.sentencepiece_tokenize_op(
                self._model.resource_handle,
                strings,
                nbest_size=nbest_size,
                alpha=alpha,
                add_bos=False,
                add_eos=False,
                reverse=False,
                out_type=tf.int32,
                Tsplits=tf.int64,
            )
            return tf.RaggedTensor.from_row_splits(values, row_splits)

        return lambda strings: self._tokenize(strings, subword_tokenize)

    def save(self, path):
        write_atomically(path, self.proto)

    def _join(self, ids):
        # tensorflow-text's SentencePiece ops take int32 ids.
        return self.subword_tokenizer.detokenize(tf.cast(ids, tf.int32))


class _SharedSentencePieceModel(tf.saved_model.experimental.TrackableResource):
    """The SentencePiece model resource of tensorflow-text, under a shared name.

    tensorflow-text creates the model as a resource private to the kernel that made it, and that
    kernel dies whenever TensorFlow clears its eager kernel cache, as `tf.random.set_seed` (and so
    `keras.utils.set_random_seed`) does: every later call then fails with "Resource
    .../SentencepieceOp/... does not exist". Under a shared name the resource manager keeps it.
    The name is the model's digest, so two different models never share a resource.
    """

    def __init__(self, proto):
        super().__init__()
        self._proto = proto
        self._shared_name = "sentencepiece_" + hashlib.sha256(proto).hexdigest()[:32]
        _ = self.resource_handle  # creates the resource now, as tensorflow-text does

    def _create_resource(self):
        return gen_sentencepiece_tokenizer.sentencepiece_op(
            model=self._proto, shared_name=self._shared_name
        )


class WordPieceTokenizer(Tokenizer):
    """The classic tutorial's WordPiece tokenizer (lossy spacing, see the module docstring).

    Args:
        vocab: list of str, index = id, starting with `RESERVED_TOKENS`.
        lower_case: bool, lowercase the input (must match how the vocabulary was learned).
        spelling: None, or "modern" to modernize the input first (see `Tokenizer`).
        name: optional module name.
    """

    def __init__(self, vocab, lower_case=False, spelling=None, name=None, casing=None):
        super().__init__(
            keras_hub.tokenizers.WordPieceTokenizer(
                vocabulary=list(vocab),
                lowercase=lower_case,
                oov_token=RESERVED_TOKENS[UNK_ID],
                dtype="int64",
            ),
            lower_case=lower_case,
            spelling=spelling,
            name=name,
            casing=casing,
        )

    @classmethod
    def from_file(cls, path, lower_case=False, spelling=None, casing=None):
        with open(path, encoding="utf-8", newline="") as vocab_file:
            vocab = vocab_file.read().split("\n")
        if vocab and vocab[-1] == "":
            vocab.pop()  # the final newline ends the last token
        return cls(vocab, lower_case=lower_case, spelling=spelling, casing=casing)

    def save(self, path):
        write_atomically(path, "".join(token + "\n" for token in self._vocab).encode("utf-8"))


def write_tokenizer_config(directory, config):
    """Writes `config` as the tokenizer directory's `CONFIG_FILE`."""
    text = json.dumps(config, indent=2) + "\n"
    write_atomically(os.path.join(directory, CONFIG_FILE), text.encode("utf-8"))


def read_tokenizer_config(directory):
    """The `tokenizer_config.json` of a tokenizer directory, or None when there is none.

    Raises:
        ValueError: the directory was written by the hand-written tokenizer of earlier releases.
    """
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as config_file:
        config = json.load(config_file)
    if config.get("format_version") != FORMAT_VERSION or config.get("type") not in TOKENIZER_TYPES:
        raise ValueError(
            f"{path} was written by an older version of this project (its hand-written WordPiece "
            "tokenizer), which this version cannot load. Retrain the run into a new run directory "
            "(e.g. `make train RUN_DIR=runs/new`), or learn new vocabularies with "
            "`python -m training.vocabulary`."
        )
    return config


def load_tokenizers(directory):
    """Loads the tokenizers of a tokenizer directory.

    Args:
        directory: a directory written by `training.vocabulary.build_tokenizers`.

    Returns:
        `(source_tokenizer, target_tokenizer)`, the same object twice for a shared vocabulary,
        unless the config records a "source_spelling", a "source_casing", "restore_accents",
        "restore_case", "restore_names" or "placeholders": then the source tokenizer modernizes,
        recases, restores (`Tokenizer.restoration`, from `accents.tsv`, `cases.tsv` and
        `names.tsv`; names are renamed by the Translator, `Restoration.rename`) or protects its input
        (`Tokenizer.placeholders`, from `known_words.txt`) and the target one does not, so they
        are two objects; and two where it records "repair_words": the target tokenizer then has
        its `Tokenizer.word_repair` (from `repair_lexicon.tsv` and `english_words.txt`).

    Raises:
        FileNotFoundError: no `tokenizer_config.json` there.
        ValueError: written by an older version (see `read_tokenizer_config`).
    """
    config = read_tokenizer_config(directory)
    if config is None:
        raise FileNotFoundError(
            f"{os.path.join(directory, CONFIG_FILE)} not found: learn the vocabularies first "
            "(python -m training.vocabulary --help)."
        )
    tokenizer_class = (
        SentencePieceTokenizer if config["type"] == "sentencepiece" else WordPieceTokenizer
    )

    def load(side, source=False):
        path = os.path.join(directory, model_file(config["type"], side))
        source_settings = {
            # Both written only when set (older directories have no such keys).
            "spelling": config.get("source_spelling"),
            "casing": config.get("source_casing"),
        }
        return tokenizer_class.from_file(
            path, lower_case=config["lower_case"], **(source_settings if source else {})
        )

    def load_source(side):
        tokenizer = load(side, source=True)
        restorations = [config.get(key, False) for key in RESTORATION_KEYS]
        if any(restorations):
            tokenizer.restoration = Restoration.from_directory(directory, *restorations)
        if config.get("placeholders"):
            tokenizer.placeholders = Placeholders.from_directory(
                directory, config.get("source_casing")
            )
        return tokenizer

    def load_target(side):
        tokenizer = load(side)
        if config.get(REPAIR_WORDS_KEY):
            tokenizer.word_repair = WordRepair.from_directory(directory)
        return tokenizer

    if config["shared"]:
        source_transforms = (
            config.get("source_spelling")
            or config.get("source_casing")
            or any(config.get(key) for key in RESTORATION_KEYS)
            or config.get("placeholders")
        )
        if source_transforms or config.get(REPAIR_WORDS_KEY):
            return load_source("shared"), load_target("shared")
        shared = load("shared")
        return shared, shared
    return load_source("src"), load_target("tgt")


def _dense_ids(ids):
    if isinstance(ids, tf.RaggedTensor):
        ids = ids.to_tensor(default_value=tf.cast(PAD_ID, ids.dtype))
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"ids must be integers, got {ids.dtype.name}.")
    if ids.shape.rank != 2:
        raise ValueError(f"ids must have shape [batch, length], got {ids.shape}.")
    return tf.cast(ids, tf.int64)
