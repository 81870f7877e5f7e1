"""Text in, text out: the translator that evaluation, training's dev BLEU and the export share.

`Translator` puts a trained `Transformer`, its tokenizers and the decoders of `model.decoding`
into one graph-friendly path: cut each source to the words the model can read, protect names
and numbers (`model.placeholders`, for a run trained with them), tokenize, cut to the model's
length, decode, detokenize, restore the names and numbers.
"""

import dataclasses

import tensorflow as tf

from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    INPUT_DTYPES,
    SCORE_OUTPUT,
    SCORES_OUTPUT,
    SIGNATURES_BY_NAME,
    SOURCE_TOKENS_OUTPUT,
    TARGET_TOKENS_OUTPUT,
    TOKEN_SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)
from model.decoding import (
    Alternatives,
    BeamSearch,
    GreedySearch,
    NextTokenRules,
    Sampling,
    SearchOptions,
    decode_transformer,
    row_seeds,
    token_log_probs,
)
from model.decoding.alternatives import continuation
from model.decoding.beam import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH
from model.decoding.common import longest_source_length, max_decoding_length_for_source
from model.decoding.penalties import validate_repetition_controls
from model.decoding.sampling import validate_sampling
from model.decoding.xla import xla_buckets
from model.placeholders import (
    MARKERS,
    NOT_WORD,
    protect_target,
    regex_split_with_offsets,
    restore,
)
from model.special_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """Decoding settings of a `Translator` (baked into an exported graph), as `decoding.json`
    and the command lines (`training.decoding_flags`) give them. The signatures' strategies
    (`beam_search`, `n_best`, `sampling`, `alternatives`; greedy search has no settings) and
    the rules of each step's choice (`next_token_rules`) are built from them.

    Attributes:
        beam_width: hypotheses kept per sentence by the `beam_search` and `n_best` signatures.
        num_hypotheses: translations per sentence of the `n_best` signature (1 to
            `beam_width`; None: `beam_width`).
        alpha: GNMT length-penalty exponent of beam search (0 disables it).
        max_length_ratio, max_length_offset: at most `ceil(ratio * S) + offset` output tokens for
            a batch whose longest source has S tokens, capped by the model's positional encodings.
        jit_compile: greedy decoding (`greedy`, `alignments`) and beam search (`beam_search`,
            `n_best`) each run as one XLA function (`greedy_decode(jit_compile=True)`,
            `beam_search_decode(jit_compile=True)`). TF Serving runs such a graph only with
            `--xla_cpu_compilation_enabled`; without it every call fails with INTERNAL "XLA
            compilation disabled". `prefix`, `alternatives`, `sample` and `score` stay plain
            graphs (the signatures' records say which: `Signature.jit_compiled` of
            `common.serving_contract.SIGNATURES`).
        xla_max_batch: with `jit_compile`, None (every batch under XLA) or the largest batch
            that runs under XLA; larger batches decode in the plain graph, where oneDNN's matrix
            products beat XLA's (`model.decoding.xla.run_loop`), with the same outputs.
        repetition_penalty, no_repeat_ngram_size: CTranslate2's repetition controls, in every
            signature (`model.decoding.penalties`); 1 and 0 disable them.
        sampling_topk, sampling_topp, sampling_temperature: the `sample` signature's draw
            (`model.decoding.sampling`): among the k most probable tokens (0: all), in the
            nucleus of mass p (1: all), from the softmax of the log-probabilities divided by the
            temperature (top-k 1 or temperature 0: greedy).
        num_alternatives: alternatives per sentence of the `alternatives` signature
            (CTranslate2's `num_hypotheses` with `return_alternatives`).
        limit_placeholders: for a run trained with placeholders (`model.placeholders`), no
            decoder writes a placeholder more often than the source holds it
            (`model.decoding.copies`), so no name or number is repeated and no made-up marker
            restores to nothing; False leaves them to the model.
        repair_words: for a run whose target tokenizer repairs made-up words
            (`model.word_repair`), the `greedy`, `beam_search` and `alignments` signatures
            replace each made-up word of a translation by the lexicon's English of the source
            word it is aligned to, or by that word; False returns the model's own words.
    """

    beam_width: int = DEFAULT_BEAM_WIDTH
    alpha: float = DEFAULT_ALPHA
    max_length_ratio: float = 1.5
    max_length_offset: int = 10
    jit_compile: bool = False
    xla_max_batch: int | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    num_hypotheses: int | None = None
    sampling_topk: int = 0
    sampling_topp: float = 1.0
    sampling_temperature: float = 1.0
    num_alternatives: int = 5
    limit_placeholders: bool = True
    repair_words: bool = True

    def __post_init__(self):
        # The strategies raise ValueError, saying what is allowed, for settings they cannot use.
        BeamSearch(self.beam_width, self.alpha, self.num_hypotheses)
        if not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}.")
        if not self.max_length_ratio >= 0:
            raise ValueError(f"max_length_ratio must be >= 0, got {self.max_length_ratio!r}.")
        if not isinstance(self.max_length_offset, int) or self.max_length_offset < 1:
            raise ValueError(
                f"max_length_offset must be an int >= 1, got {self.max_length_offset!r}."
            )
        if self.xla_max_batch is not None and not (
            isinstance(self.xla_max_batch, int) and self.xla_max_batch >= 1
        ):
            raise ValueError(f"xla_max_batch must be an int >= 1, got {self.xla_max_batch!r}.")
        if self.xla_max_batch is not None and not self.jit_compile:
            raise ValueError("xla_max_batch bounds the batches XLA decodes: set jit_compile too.")
        validate_repetition_controls(self.repetition_penalty, self.no_repeat_ngram_size)
        validate_sampling(self.sampling_topk, self.sampling_topp, self.sampling_temperature)
        Alternatives(GreedySearch(), self.num_alternatives)
        for name in ("limit_placeholders", "repair_words"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}.")

    @property
    def n_best_size(self):
        """The translations per sentence of the `n_best` signature."""
        return self.beam_width if self.num_hypotheses is None else self.num_hypotheses

    @property
    def beam_search(self):
        """The `beam_search` and `prefix` signatures' strategy."""
        return BeamSearch(self.beam_width, self.alpha)

    @property
    def n_best(self):
        """The `n_best` signature's strategy: beam search returning `n_best_size` hypotheses."""
        return BeamSearch(self.beam_width, self.alpha, self.n_best_size)

    def sampling(self, seeds):
        """The `sample` signature's strategy for the row seeds `seeds` `(batch,)`."""
        return Sampling(seeds, self.sampling_topk, self.sampling_topp, self.sampling_temperature)

    @property
    def alternatives(self):
        """The `alternatives` signature's decoding: each alternative continued by beam search
        (greedy search at `beam_width` 1)."""
        return Alternatives(continuation(self.beam_width, self.alpha), self.num_alternatives)

    def next_token_rules(self, placeholder_ids=()):
        """The `NextTokenRules` of every signature: [END], the repetition controls, and
        `placeholder_ids` (`model.decoding.copies`)."""
        return NextTokenRules(
            END_ID,
            repetition_penalty=self.repetition_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            placeholder_ids=placeholder_ids,
        )

    @property
    def repetition_controls(self):
        """The decoders' keyword arguments for the repetition controls."""
        return {
            "repetition_penalty": self.repetition_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
        }


# Tokens of the shortest source: every tokenized source holds [START] and [END] ("" is just that).
MIN_SOURCE_TOKENS = 2
# A source is cut to this many words (and whitespace-separated tokens) per token of the model's
# positional encodings before the steps whose cost follows its length (`cut_to_words`).
READ_WORDS_PER_TOKEN = 2


def _first_tokens(text, count):
    """`text` `[batch]` without what follows each row's first `count` whitespace-separated
    tokens: `tf.strings.split` stops splitting there, so a row costs what it keeps."""
    parts = tf.strings.split(text, maxsplit=count)
    rest = tf.strings.reduce_join(parts[:, count:], axis=1)  # "" where nothing follows.
    kept = tf.strings.length(text) - tf.strings.length(rest)
    return tf.strings.substr(text, tf.zeros_like(kept), kept)


def cut_to_words(text, count):
    """`text` `[batch]` with each row cut after its first `count` words and its first `count`
    whitespace-separated tokens (the bytes before the cut kept as they are; a shorter row
    whole).

    Each word (letters, digits and marks: `model.placeholders.NOT_WORD` separates them) and
    each whitespace-separated token of a source gives the model at least one piece, so a cut at
    more of them than the model reads pieces changes none of the pieces it reads. Renaming,
    placeholders and tokenization cost time with a row's length, before the model cuts a
    source to its length: on rows of 16 KiB they cost several times what the model's own work
    on what it read of them did (`benchmarks.bench_long_rows`).
    """
    text = _first_tokens(text, count)
    _, _, ends = regex_split_with_offsets(text, NOT_WORD)
    # The end of each row's word number `count`, where it has more words than that.
    last_kept_end = tf.reduce_max(ends[:, count - 1 : count], axis=1)
    kept = tf.where(
        ends.row_lengths() > count, last_kept_end, tf.cast(tf.strings.length(text), tf.int64)
    )
    return tf.strings.substr(text, tf.zeros_like(kept), kept)


def truncate_source_ids(ids, max_tokens):
    """Pads tokenized sources into a batch, cutting each to `max_tokens` tokens.

    Args:
        ids: `tf.RaggedTensor` `[batch, (tokens)]` of `[START] ... [END]` ids.
        max_tokens: int, the model's longest source (its `pe_input`).

    Returns:
        int32 `[batch, min(longest row, max_tokens)]`, `PAD_ID` padding. A cut row ends with
        [END] in place of its last kept token: the model was trained on [END]-terminated sources.
    """
    if max_tokens < MIN_SOURCE_TOKENS:
        raise ValueError(f"max_tokens must leave room for [START] and [END], got {max_tokens}.")
    was_cut = ids.row_lengths() > max_tokens
    dense = tf.cast(ids[:, :max_tokens].to_tensor(default_value=PAD_ID), tf.int32)
    is_last_column = tf.equal(tf.range(tf.shape(dense)[1]), max_tokens - 1)
    return tf.where(was_cut[:, tf.newaxis] & is_last_column[tf.newaxis, :], END_ID, dense)


def input_signature(signature_name):
    """The `tf.TensorSpec`s of a signature's inputs (`common.serving_contract.SIGNATURES`), each
    `[batch]`, in the order its `Translator` method takes them."""
    return [
        tf.TensorSpec([None], tf.as_dtype(INPUT_DTYPES[record.name]), name=record.name)
        for record in SIGNATURES_BY_NAME[signature_name].inputs
    ]


def traced(method, *input_signature):
    """`method` (a `Translator` method) as a `tf.function` of `input_signature`, traced once.

    Without AutoGraph: the translation path branches and loops on Python values only (its
    loops are `tf.while_loop`s), so AutoGraph would only transpile each of the few hundred
    functions it calls, which took half of a cold start's tracing (docs/inference.md).
    """
    return tf.function(method, input_signature=list(input_signature), autograph=False)


class Translator:
    """Strings in, strings out, everything in the graph: the project's one translation path.

    Tokenizes, cuts each source to the model's positional encodings, decodes (greedy or beam
    search, with the output-length bound of `options`) and detokenizes. Each of the export's
    signatures is the method its record names (`common.serving_contract.SIGNATURES`,
    `Signature.method`: `greedy` for `serving_default`, the others' own names), called with the
    record's inputs in order; evaluation, the dev BLEU of training and the notebooks call the
    same methods, so the BLEU the project reports is the BLEU of what TF Serving serves.

    A plain Python object on purpose: an `ExportArchive` tracks the Keras model's variables and
    the tokenizers (whose SentencePiece ops hold the model as a resource), and these methods only
    close over them. Wrap a method in a `tf.function` with a `[None]` string input signature to
    trace it once and call it with batches of any size (`traced`).

    Args:
        model: a built `model.Transformer`.
        source_tokenizer, target_tokenizer: `model.tokenizer.Tokenizer`s of the run.
        options: `DecodingOptions`.
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, options=DecodingOptions()):
        if source_tokenizer.vocab_size != model.input_vocab_size:
            raise ValueError(
                f"The source tokenizer has {source_tokenizer.vocab_size} tokens but the model "
                f"expects {model.input_vocab_size}: they come from different runs."
            )
        if target_tokenizer.vocab_size != model.target_vocab_size:
            raise ValueError(
                f"The target tokenizer has {target_tokenizer.vocab_size} tokens but the model "
                f"expects {model.target_vocab_size}: they come from different runs."
            )
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.options = options
        self.rules = options.next_token_rules(self._limited_placeholder_ids())

    def _limited_placeholder_ids(self):
        """The `(source_id, target_id)` pairs of the placeholder pieces the decoders limit
        (`model.decoding.copies`): those of a run with placeholders, unless
        `limit_placeholders` is off."""
        if not self.options.limit_placeholders or self.source_tokenizer.placeholders is None:
            return ()
        source_vocab, target_vocab = self.source_tokenizer.vocab, self.target_tokenizer.vocab
        return tuple(
            (source_vocab.index(marker), target_vocab.index(marker))
            for marker in MARKERS
            if marker in source_vocab and marker in target_vocab
        )

    def source_ids(self, text):
        """`[batch]` strings → int32 `[batch, S]` source ids, cut to the model's length."""
        return truncate_source_ids(self.source_tokenizer.tokenize(text), self.model.pe_input)

    def source_lengths(self, text):
        """Tokens of each source of `text` (`[batch]` strings) as the signatures decode it: after
        the placeholders of a run trained with them, [START] and [END] included, cut to the
        model's length (int32 `[batch]`)."""
        text = self._renamed(self._readable(text))
        placeholders = self.source_tokenizer.placeholders
        if placeholders is not None:
            text, _ = placeholders.protect(text)
        return tf.reduce_sum(tf.cast(tf.not_equal(self.source_ids(text), PAD_ID), tf.int32), 1)

    def _on_nonempty_batch(self, translate, text, *row_inputs):
        """Runs `translate(text, *row_inputs)` (`_with_placeholders`), feeding it one row of
        zeros ("" for strings) when the batch is empty.

        The model's attention cannot run on a `[0, 0]` batch, and a `tf.cond` around it would
        need a hand-written empty output per signature; decoding one empty string and keeping
        none of its rows gives every output the right dtype and rank for free.

        Raises:
            tf.errors.InvalidArgumentError: a row input's batch differs from `text`'s.
        """
        batch_size = tf.shape(text)[0]
        for row_input in row_inputs:
            tf.debugging.assert_equal(
                tf.shape(row_input)[0],
                batch_size,
                message="every input of a request needs one row per source text",
            )
        inputs = [
            tf.cond(batch_size > 0, lambda x=x: x, lambda x=x: tf.zeros([1], x.dtype))
            for x in (text, *row_inputs)
        ]
        outputs = self._with_placeholders(translate, *inputs)
        return {name: output[:batch_size] for name, output in outputs.items()}

    def _with_placeholders(self, translate, text, *row_inputs):
        """`translate(text, *row_inputs)`, around which a run with placeholders
        (`model.placeholders`, `source_tokenizer.placeholders`) replaces each source's numbers
        and unknown names by markers, and the same words in its target-side inputs (a prefix, a
        scored target: the string row inputs), then puts the words back in every string output
        (translations, pieces). Each source is first cut to the words the model can read
        (`_readable`), then names typed in today's spelling are renamed (`model.restoration`),
        or the placeholders would protect them as unknown."""
        text = self._renamed(self._readable(text))
        placeholders = self.source_tokenizer.placeholders
        if placeholders is None:
            return translate(text, *row_inputs)
        text, values = placeholders.protect(text)
        row_inputs = [
            protect_target(row, values) if row.dtype == tf.string else row for row in row_inputs
        ]
        return {
            name: restore(output, values) if output.dtype == tf.string else output
            for name, output in translate(text, *row_inputs).items()
        }

    def _readable(self, text):
        """`text` cut to what the model can read (`cut_to_words`, at READ_WORDS_PER_TOKEN
        words a token of its positional encodings), before the steps whose cost follows a
        row's length. A source that long was cut by the model before: its case (a source
        with no capital, or in capitals) is now judged on the words kept."""
        return cut_to_words(text, READ_WORDS_PER_TOKEN * self.model.pe_input)

    def _renamed(self, text):
        restoration = self.source_tokenizer.restoration
        return text if restoration is None else restoration.rename(text)

    def max_decoding_length(self, source_length):
        """Output tokens the decoders produce at most for a batch whose longest source has
        `source_length` tokens (int or scalar tensor, [START] and [END] included): `ceil(ratio *
        source_length) + offset` of the options, capped by the model's positional encodings.

        Returns:
            int32 scalar.
        """
        return max_decoding_length_for_source(
            source_length,
            self.options.max_length_ratio,
            self.options.max_length_offset,
            limit=self.model.pe_target - 1,
        )

    def _max_decoding_length_for(self, source_ids):
        return self.max_decoding_length(longest_source_length(source_ids))

    def xla_buckets(self, max_batch, max_source_tokens=None):
        """The XLA programs that the compiled signatures (`options.jit_compile`) each compile
        for requests of 1 to `max_batch` sentences of at most `max_source_tokens` tokens
        (`model.decoding.xla.xla_buckets`).

        Args:
            max_batch: int, at least 1; batches beyond `options.xla_max_batch` compile nothing
                (they run in the plain graph).
            max_source_tokens: int, at least `MIN_SOURCE_TOKENS` ([START] and [END] included);
                default, and at most, the model's `pe_input` (sources are cut to it).

        Returns:
            dict `{(batch, width, slots): (batch_size, source_length)}`: each program with the
            smallest request that compiles it.

        Raises:
            ValueError: `max_batch` below 1 or `max_source_tokens` below `MIN_SOURCE_TOKENS`.
        """
        longest = self.model.pe_input
        if max_source_tokens is not None:
            if max_source_tokens < MIN_SOURCE_TOKENS:
                raise ValueError(
                    f"max_source_tokens must be at least {MIN_SOURCE_TOKENS} ([START] and "
                    f"[END]), got {max_source_tokens!r}."
                )
            longest = min(max_source_tokens, longest)
        if self.options.xla_max_batch is not None and max_batch >= 1:
            max_batch = min(max_batch, self.options.xla_max_batch)
        return xla_buckets(
            max_batch,
            range(MIN_SOURCE_TOKENS, longest + 1),
            self.model.pe_input,
            self.max_decoding_length,
        )

    def _decode(self, strategy, source_ids, **options):
        """`decode_transformer` of `strategy` over `source_ids` with `rules` and the options'
        output-length bound; `options`: the other `SearchOptions` fields."""
        return decode_transformer(
            strategy,
            self.model,
            source_ids,
            START_ID,
            SearchOptions(self.rules, self._max_decoding_length_for(source_ids), **options),
        )

    @property
    def _xla(self):
        """The `SearchOptions` of the signatures XLA compiles (`DecodingOptions.jit_compile`)."""
        return {
            "jit_compile": self.options.jit_compile,
            "xla_max_batch": self.options.xla_max_batch,
        }

    @property
    def _repairs_words(self):
        """Whether the `greedy`, `beam_search` and `alignments` translations are repaired
        (`DecodingOptions.repair_words`, and a target tokenizer with a `WordRepair`)."""
        return self.options.repair_words and self.target_tokenizer.word_repair is not None

    def _translation(self, source_ids, decoded):
        """The detokenized `decoded["tokens"]`, made-up words repaired where the run repairs
        them (`decoded` then holds the `alignment`)."""
        translations = self.target_tokenizer.detokenize(decoded["tokens"])
        if not self._repairs_words:
            return translations
        return self.target_tokenizer.word_repair(
            translations,
            _pieces_or_empty(self.source_tokenizer, source_ids, reserved=""),
            _pieces_or_empty(self.target_tokenizer, decoded["tokens"], reserved=""),
            decoded["alignment"],
        )

    def _greedy_decode(self, text, with_alignment=False):
        source_ids = self.source_ids(text)
        decoded = self._decode(
            GreedySearch(),
            source_ids,
            with_alignment=with_alignment or self._repairs_words,
            **self._xla,
        )
        return source_ids, decoded

    def _translate_greedy(self, text):
        source_ids, decoded = self._greedy_decode(text)
        return {
            TRANSLATION_OUTPUT: self._translation(source_ids, decoded),
            SCORE_OUTPUT: decoded["scores"],
        }

    def _beam_search_decode(self, text, strategy, prefix=None):
        # Not with a prefix: XLA's padded batch would need padded prefixes.
        xla = self._xla if prefix is None else {**self._xla, "jit_compile": False}
        return self._decode(
            strategy, self.source_ids(text), prefix=prefix, with_alignment=False, **xla
        )

    def _sample(self, text, seed):
        source_ids = self.source_ids(text)
        strategy = self.options.sampling(row_seeds(seed, tf.shape(source_ids)[0]))
        decoded = self._decode(strategy, source_ids)
        return {
            TRANSLATION_OUTPUT: self.target_tokenizer.detokenize(decoded["tokens"]),
            SCORE_OUTPUT: decoded["scores"],
        }

    def target_prefix_ids(self, target_prefix):
        """`[batch]` strings → int32 `[batch, P]` the pieces each translation starts with
        (no [START] nor [END]), `PAD_ID` padding; "" gives none.

        The prefix is tokenized as a text of its own, so a prefix ending mid-word forces the
        pieces of that partial word as if the word ended there ("The ca" forces "▁ca"): the
        decoder may continue it with pieces that join it ("t" → "cat") or start a new word,
        and does not first go back to the pieces the whole word would have had.
        """
        ids = self.target_tokenizer.tokenize(target_prefix)[:, 1:-1]
        return tf.cast(ids.to_tensor(default_value=PAD_ID), tf.int32)

    def _translate_prefix(self, text, target_prefix):
        decoded = self._beam_search_decode(
            text, self.options.beam_search, prefix=self.target_prefix_ids(target_prefix)
        )
        return {
            TRANSLATION_OUTPUT: self.target_tokenizer.detokenize(decoded["tokens"]),
            SCORE_OUTPUT: decoded["scores"],
        }

    def _alternatives(self, text, target_prefix):
        source_ids = self.source_ids(text)
        options = SearchOptions(
            self.rules,
            self._max_decoding_length_for(source_ids),
            prefix=self.target_prefix_ids(target_prefix),
        )
        decoded = self.options.alternatives.decode(self.model, source_ids, START_ID, options)
        return self._n_translations(decoded, self.options.num_alternatives)

    def _n_translations(self, decoded, size):
        """`translations` `[batch, size]` and `scores` of `decoded`'s `tokens`
        `[batch, size, T]` and `scores`."""
        tokens = decoded["tokens"]
        # The detokenizer takes a batch of rows: the n of every source as one batch.
        translations = self.target_tokenizer.detokenize(
            tf.reshape(tokens, [-1, tf.shape(tokens)[2]])
        )
        return {
            TRANSLATIONS_OUTPUT: tf.reshape(translations, [-1, size]),
            SCORES_OUTPUT: tf.ensure_shape(decoded["scores"], [None, size]),
        }

    def _translate_beam_search(self, text):
        source_ids = self.source_ids(text)
        decoded = self._decode(
            self.options.beam_search,
            source_ids,
            with_alignment=self._repairs_words,
            **self._xla,
        )
        return {
            TRANSLATION_OUTPUT: self._translation(source_ids, decoded),
            SCORE_OUTPUT: decoded["scores"],
        }

    def _translate_n_best(self, text):
        decoded = self._beam_search_decode(text, self.options.n_best)
        return self._n_translations(decoded, self.options.n_best_size)

    def _translate_with_alignments(self, text):
        source_ids, decoded = self._greedy_decode(text, with_alignment=True)
        target_ids = decoded["tokens"]
        return {
            TRANSLATION_OUTPUT: self._translation(source_ids, decoded),
            SCORE_OUTPUT: decoded["scores"],
            SOURCE_TOKENS_OUTPUT: _pieces_or_empty(self.source_tokenizer, source_ids),
            TARGET_TOKENS_OUTPUT: _pieces_or_empty(self.target_tokenizer, target_ids),
            ALIGNMENT_OUTPUT: decoded["alignment"],
        }

    def greedy(self, text):
        """`serving_default`: `text` `[batch]` → `translation` `[batch]`, `score` `[batch]`
        (summed log-probability of the tokens up to [END])."""
        return self._on_nonempty_batch(self._translate_greedy, text)

    def beam_search(self, text):
        """`beam_search`: as `greedy` with beam search; `score` is length-normalized."""
        return self._on_nonempty_batch(self._translate_beam_search, text)

    def n_best(self, text):
        """`n_best`: beam search's `options.n_best_size` best translations of each source,
        best first: `translations` string `[batch, N]`, `scores` float32 `[batch, N]`
        (length-normalized, as `beam_search`'s, whose translation and score are column 0)."""
        return self._on_nonempty_batch(self._translate_n_best, text)

    def target_ids(self, target):
        """`[batch]` strings → int32 `[batch, T]` output ids as the decoders return them (no
        [START], [END] last, `PAD_ID` padding), cut to the decoders' longest output."""
        return truncate_source_ids(
            self.target_tokenizer.tokenize(target)[:, 1:], self.model.pe_target - 1
        )

    def _score(self, text, target):
        target_ids = self.target_ids(target)
        log_probs = token_log_probs(self.model, self.source_ids(text), target_ids, START_ID)
        return {
            SCORE_OUTPUT: tf.reduce_sum(log_probs, axis=1),
            TARGET_TOKENS_OUTPUT: _pieces_or_empty(self.target_tokenizer, target_ids),
            TOKEN_SCORES_OUTPUT: log_probs,
        }

    def score(self, text, target):
        """`score`: forced decoding of `target` `[batch]` (one translation per source):
        `target_tokens` string `[batch, T]` (its pieces and [END], "" padding), `token_scores`
        float32 `[batch, T]` (each piece's log-probability given the source and the pieces
        before it, from the distribution the decoders choose from; 0 at padding) and `score`
        `[batch]`, their sum: the greedy signature's score of the same tokens. A target longer
        than the decoders' longest output is cut to it, its last kept piece replaced by [END]."""
        return self._on_nonempty_batch(self._score, text, target)

    def sample(self, text, seed):
        """`sample`: random sampling with the options' top-k, top-p and temperature, `seed`
        int32 `[batch]` one per sentence: `translation` `[batch]`, `score` `[batch]` (summed
        untempered log-probability of the drawn tokens). A sentence's draws depend only on its
        text and seed, not on its row or the other sentences (`model.decoding.sampling`); the
        output-length bound, as every signature's, follows the batch's longest source."""
        return self._on_nonempty_batch(self._sample, text, seed)

    def prefix(self, text, target_prefix):
        """`prefix`: beam search (the options' width and alpha) continuing each sentence's
        `target_prefix` `[batch]` ("" none; pieces as `target_prefix_ids` makes them), with
        CTranslate2's `target_prefix` semantics (`model.decoding.prefix`): the translation
        starts with the prefix, and `score` `[batch]` covers the pieces after it."""
        return self._on_nonempty_batch(self._translate_prefix, text, target_prefix)

    def alternatives(self, text, target_prefix):
        """`alternatives`: CTranslate2's `return_alternatives` after each `target_prefix`
        (`model.decoding.alternatives`): the options' `num_alternatives` most probable next
        pieces, best first, each continued by beam search: `translations` string
        `[batch, N]` (prefix, piece, continuation) and `scores` float32 `[batch, N]`."""
        return self._on_nonempty_batch(self._alternatives, text, target_prefix)

    def alignments(self, text):
        """`alignments`: `greedy`'s outputs plus `source_tokens` `[batch, S]`, `target_tokens`
        `[batch, T]` and `alignment` `[batch, T, S]`."""
        return self._on_nonempty_batch(self._translate_with_alignments, text)


def _pieces_or_empty(tokenizer, ids, reserved=None):
    """Subword pieces of `ids`, "" where `ids` is padding; `reserved` in place of the other
    reserved tokens' names ([START], [END]) when given."""
    pieces = tf.where(tf.not_equal(ids, PAD_ID), tokenizer.lookup(ids), "")
    if reserved is None:
        return pieces
    return tf.where(ids >= len(RESERVED_TOKENS), pieces, reserved)
