"""Converts a trained run into a CTranslate2 model directory: the same weights, run by CTranslate2.

    python -m inference.export_ctranslate2 --run_dir runs/NAME --output_dir ct2/NAME \
        [--quantization int8] [--force]

writes CTranslate2's layout (`model.bin`, `config.json`, `source_vocabulary.json` and
`target_vocabulary.json`, or one `shared_vocabulary.json`), which `ctranslate2.Translator(D)`
loads. The mapping, checked token for token against the project's decoders and the functions
the SavedModel's signatures are traced from (tests/inference/test_export_ctranslate2.py):

- `ctranslate2.specs.TransformerSpec`, post-LN or pre-LN as trained (`pre_norm`; pre-LN with
  the final LayerNorm of each stack); ReLU feed-forward; the model's LayerNorm epsilon.
- Embeddings scaled by √d_model (`scale_embeddings`), then the project's positional encodings,
  set explicitly: CTranslate2's built-in sinusoid puts every sine before every cosine, uses
  another frequency spacing and starts at position 1, none of which this model was trained with.
- Keras `Dense` kernels `(in, out)` become CTranslate2's `(out, in)` weights; self-attention's
  query, key and value projections are fused into one `(3·d_model, d_model)` weight, and
  cross-attention's key and value into one (CTranslate2's layout). An output projection tied
  to the target embedding is written once (CTranslate2 aliases equal variables).
- Vocabularies: the tokenizers' `vocab` (index = id) as they are, so every id, reserved or not,
  is the same on both sides. CTranslate2's special tokens are named after ours: `<unk>` is
  `[UNK]` (1), `<s>` is `[START]` (2), `</s>` is `[END]` (3). CTranslate2 has no padding token
  (it masks by length), so `<blank>` has no counterpart; `[PAD]` (0) stays a plain entry that
  the project's decoders never emit: pass `suppress_sequences=[["[PAD]"]]` to
  `translate_batch` (`decoding_options`) for the same outputs.
- The source gets `[START]` and `[END]` around it from CTranslate2 (`add_source_bos`/`_eos`),
  as our tokenizer adds them, so callers pass the subword pieces alone (`source_pieces`); a
  source cut by `max_input_length` keeps its `[END]`, as `inference.export` cuts one.

CTranslate2 tokenizes nothing: pieces in, pieces out. `source_pieces` and `target_ids` turn the
run's tokenizer's ids into pieces and back; `tokenizer.detokenize` gives the text.

Where CTranslate2 (4.8) decodes differently from `model.decoding`:

- Beam search's length normalization: CTranslate2 divides a finished hypothesis's
  log-probability by |y|^length_penalty, the project by GNMT's ((5 + |y|) / 6)^alpha, |y|
  counting the end token in both. CTranslate2 has no GNMT option, so the two can rank finished
  hypotheses differently.
- Beam search's bookkeeping: both expand 2·beam candidates per step. CTranslate2 finishes the
  `</s>` candidates among the best `beam` of them only, and stops a sentence once its best
  candidate is `</s>` (no length penalty) or once beam·patience hypotheses have finished; the
  project keeps the best `beam` of every `</s>` candidate and stops once no alive hypothesis can
  beat the worst of them. The best hypothesis is the same unless a `</s>` candidate ranked
  below the best `beam` would have won (not seen on the tested sentences).
- Scores: suppressing `[PAD]` renormalizes CTranslate2's softmax without it, while the project
  adds -1e9 to its log-probability after the softmax, so sums differ by Σ log(1 - P([PAD])).
- An empty source: CTranslate2 returns an empty translation without decoding; the project
  decodes `[START] [END]`.
"""

import argparse
import os

import numpy as np
import tensorflow as tf
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec

from model.decoding import max_decoding_length_for
from model.placeholders import restore
from model.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID
from run_directory import artifacts


def decoding_options(target_vocab):
    """`translate_batch` keyword arguments that make CTranslate2 decode as the project does:
    padding never emitted (our decoders give [PAD] a log-probability of -1e9)."""
    return {"suppress_sequences": [[target_vocab[PAD_ID]]]}


def greedy_options(run_dir, target_vocab, pieces):
    """`translate_batch` keyword arguments that decode the batch `pieces` (`source_pieces`) as
    the project's greedy decoding does: a beam of 1 (CTranslate2's default is 2), no [PAD]
    (`decoding_options`), sources cut to the model's positions, and the run's output-length bound
    for the batch's longest source (`model.decoding.max_decoding_length_for`, the run's
    decoding.json).
    """
    positions = artifacts.read_config(run_dir)["max_sequence_length"]
    options = artifacts.decoding_options(run_dir)
    longest = min(max(map(len, pieces), default=0) + 2, positions)  # with [START] and [END]
    bound = max_decoding_length_for(
        tf.ones([1, longest], tf.int32),
        options.max_length_ratio,
        options.max_length_offset,
        limit=positions - 1,
    )
    return {
        "beam_size": 1,
        "max_input_length": positions,
        "max_decoding_length": int(bound),
        **decoding_options(target_vocab),
    }


def _check_vocab(vocab, side, model_size):
    """`vocab` as a list, checked: model-sized, no repeated token (CTranslate2 maps a token
    string to one id, so a repeat would break the ids)."""
    vocab = list(vocab)
    if len(vocab) != model_size:
        raise ValueError(
            f"The {side} vocabulary has {len(vocab)} tokens but the model "
            f"expects {model_size}: they come from different runs."
        )
    seen = {}
    for index, token in enumerate(vocab):
        if token in seen:
            raise ValueError(
                f"The {side} vocabulary holds {token!r} twice (ids {seen[token]} "
                f"and {index}); CTranslate2 needs one id per token string."
            )
        seen[token] = index
    return vocab


def _linear(spec, weights, *names):
    """The projections `names` of `weights` (kernels `W_<name>` `(in, out)`, biases `b_<name>`),
    reading the same input, as one `LinearSpec` (weight `(out, in)`, outputs stacked)."""
    spec.weight = np.concatenate([np.asarray(weights[f"W_{name}"]).T for name in names])
    spec.bias = np.concatenate([np.asarray(weights[f"b_{name}"]) for name in names])


def _layer_norm(spec, weights):
    spec.gamma = np.asarray(weights["gamma"])
    spec.beta = np.asarray(weights["beta"])


def _attention(spec, weights, self_attention):
    """A sub-layer's `MultiHeadAttention.named_weights` (with its `layer_norm`) into a
    `MultiHeadAttentionSpec`.

    CTranslate2's attention layer owns the residual and the LayerNorm of its sub-layer, applied
    before (pre-LN) or after the sum (post-LN), as the model's residual blocks do.
    """
    if self_attention:
        _linear(spec.linear[0], weights, "Q", "K", "V")
    else:
        _linear(spec.linear[0], weights, "Q")
        _linear(spec.linear[1], weights, "K", "V")
    _linear(spec.linear[-1], weights, "O")
    _layer_norm(spec.layer_norm, weights["layer_norm"])


def _feed_forward(spec, weights):
    _linear(spec.linear_0, weights, "1")
    _linear(spec.linear_1, weights, "2")
    _layer_norm(spec.layer_norm, weights["layer_norm"])


def _embeddings(spec, stack_weights):
    """Token embeddings and the stack's own positional encoding table `(positions, d_model)`."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = np.asarray(stack_weights["embedding"])
    spec.scale_embeddings = True
    spec.position_encodings.encodings = np.asarray(stack_weights["positional_encoding"])
    if "final_layer_norm" in stack_weights:
        _layer_norm(spec.layer_norm, stack_weights["final_layer_norm"])


def transformer_spec_of(model, source_vocab, target_vocab):
    """The `ctranslate2.specs.TransformerSpec` of a built `model.Transformer`, weights set.

    Args:
        model: a built `Transformer` (ReLU feed-forward, sinusoidal positions, as all are).
        source_vocab, target_vocab: lists of str, index = id (the tokenizers' `vocab`).

    Returns:
        A `TransformerSpec` with vocabularies and config registered, not yet validated.
    """
    source_vocab = _check_vocab(source_vocab, "source", model.input_vocab_size)
    target_vocab = _check_vocab(target_vocab, "target", model.target_vocab_size)
    for token_id in (UNK_ID, START_ID, END_ID):
        if source_vocab[token_id] != target_vocab[token_id]:
            raise ValueError(
                f"Reserved id {token_id} is {source_vocab[token_id]!r} in the source vocabulary "
                f"but {target_vocab[token_id]!r} in the target one; CTranslate2 names each "
                "special token once for both."
            )
    spec = transformer_spec.TransformerSpec.from_config(
        model.num_layers,
        model.num_heads,
        pre_norm=model.norm_first,
        activation=common_spec.Activation.RELU,
    )
    weights = model.named_weights()
    encoder, decoder = weights["encoder"], weights["decoder"]
    _embeddings(spec.encoder, encoder)
    for layer_spec, layer in zip(spec.encoder.layer, encoder["layers"]):
        _attention(layer_spec.self_attention, layer["self_attention"], self_attention=True)
        _feed_forward(layer_spec.ffn, layer["feed_forward"])
    _embeddings(spec.decoder, decoder)
    for layer_spec, layer in zip(spec.decoder.layer, decoder["layers"]):
        _attention(layer_spec.self_attention, layer["self_attention"], self_attention=True)
        _attention(layer_spec.attention, layer["encoder_decoder_attention"], self_attention=False)
        _feed_forward(layer_spec.ffn, layer["feed_forward"])
    projection = weights["pre_softmax_linear"]
    spec.decoder.projection.weight = np.ascontiguousarray(np.asarray(projection["W"]).T)
    spec.decoder.projection.bias = np.asarray(projection["b"])

    spec.register_source_vocabulary(source_vocab)
    spec.register_target_vocabulary(target_vocab)
    config = spec.config
    config.unk_token = target_vocab[UNK_ID]
    config.bos_token = target_vocab[START_ID]
    config.eos_token = target_vocab[END_ID]
    config.decoder_start_token = target_vocab[START_ID]
    config.add_source_bos = True
    config.add_source_eos = True
    config.layer_norm_epsilon = float(weights["layer_norm_epsilon"])
    return spec


class TransformerConverter(Converter):
    """`ctranslate2.converters.Converter` for an in-memory `model.Transformer` and its vocabularies
    (`convert(output_dir, quantization=..., force=...)` writes the model directory)."""

    def __init__(self, model, source_vocab, target_vocab):
        self._model = model
        self._source_vocab = source_vocab
        self._target_vocab = target_vocab

    def _load(self):
        return transformer_spec_of(self._model, self._source_vocab, self._target_vocab)


def source_pieces(tokenizer, texts):
    """Source texts as the pieces CTranslate2 takes: tokenized by the run's tokenizer, without
    the [START]/[END] CTranslate2 adds itself. Returns a list of lists of str."""
    vocab = tokenizer.vocab
    ids = tokenizer.tokenize(tf.constant(texts, tf.string)).to_list()
    return [[vocab[token_id] for token_id in row[1:-1]] for row in ids]


def protect_sources(tokenizer, texts):
    """`(texts, values)`: `texts` (list of str) with their numbers and unknown names replaced by
    markers, as the run's translator replaces them (`model.placeholders`; as they are for a run
    trained without), and what `restore_words` puts back (None without)."""
    if tokenizer.placeholders is None:
        return list(texts), None
    protected, values = tokenizer.placeholders.protect(tf.constant(texts, tf.string))
    return [text.decode("utf-8") for text in protected.numpy()], values


def restore_words(translations, values):
    """Detokenized `translations` (`[batch]` tf.string) with the words of `protect_sources`'s
    `values` back in place of their markers: list of str."""
    if values is not None:
        translations = restore(translations, values)
    return [text.decode("utf-8") for text in translations.numpy()]


def target_ids(target_vocab, pieces):
    """CTranslate2's output pieces (list of lists of str) → lists of ids, as our decoders give."""
    index = {token: token_id for token_id, token in enumerate(target_vocab)}
    return [[index[piece] for piece in row] for row in pieces]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m inference.export_ctranslate2",
        description="Convert a trained run into a CTranslate2 model directory (see the module "
        "docstring for the mapping and how to call it).",
    )
    parser.add_argument("--run_dir", required=True, help="the training run to convert")
    Converter.declare_arguments(parser)
    args = parser.parse_args(argv)
    if args.vocab_mapping is not None:
        parser.error("--vocab_mapping is not supported: the run's vocabularies are used whole.")
    if os.path.exists(args.output_dir) and not args.force:
        parser.error(f"{args.output_dir} already exists; pass --force to replace it.")
    artifacts.require_trained_run(args.run_dir)
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(args.run_dir)
    converter = TransformerConverter(model, source_tokenizer.vocab, target_tokenizer.vocab)
    output_dir = converter.convert_from_args(args)
    print(
        f"CTranslate2 model ({args.quantization or 'float32'} weights) written to {output_dir}.\n"
        f"  ctranslate2.Translator({output_dir!r}).translate_batch(pieces, **greedy_options("
        f"{args.run_dir!r}, target_tokenizer.vocab, pieces))\n"
        "  translates as the project's greedy decoding (beam_size=1: CTranslate2's default is a "
        "beam of 2),\n"
        "  with pieces = source_pieces(source_tokenizer, texts) (inference.export_ctranslate2) and\n"
        "  source_tokenizer, target_tokenizer = model.tokenizer.load_tokenizers("
        f"{os.path.join(args.run_dir, artifacts.TOKENIZER_DIR)!r});\n"
        "  back to text: target_tokenizer.detokenize(tf.ragged.constant(target_ids("
        "target_tokenizer.vocab, [r.hypotheses[0] for r in results]), tf.int64)).\n"
        "  docs/serving.md (CTranslate2) has the whole recipe."
    )


if __name__ == "__main__":
    main()
