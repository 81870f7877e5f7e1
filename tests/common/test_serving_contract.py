"""The registry of serving signatures (`common.serving_contract.SIGNATURES`) agrees with the code
it names: each record's `Translator` method, options, client flags and warmup inputs.

What an export really serves is compared with the records where an export already exists:
tests/inference/test_export.py (inputs, outputs and dtypes against the loaded SavedModel and
`saved_model_cli show`) and tests/inference/test_export_xla.py (the compiled signatures against what XLA
compiles in a `--jit_compile` export).
"""

import dataclasses
import inspect

import pytest
import tensorflow as tf

from common import serving_contract
from common.serving_contract import (
    ALIGNMENTS_SIGNATURE,
    ALTERNATIVES_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    INPUTS,
    N_BEST_SIGNATURE,
    PREFIX_SIGNATURE,
    SAMPLE_SIGNATURE,
    SCORE_SIGNATURE,
    SIGNATURES,
    TEXT_INPUT,
    Signature,
)
from inference import export
from model.translator import DecodingOptions, Translator, input_signature
from serving import client

# Every option away from its default, and what export_info.json recorded for them before the
# registry (written out by hand).
LOOP = {"max_length_ratio": 2.0, "max_length_offset": 7}
REPETITION = {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3}
BEAM = {"beam_width": 3, "alpha": 0.8}
SAMPLING = {"sampling_topk": 5, "sampling_topp": 0.9, "sampling_temperature": 0.7}
COMPILED = {"jit_compile": True, "xla_max_batch": 4}
PLAIN = {"jit_compile": False}
OPTIONS = DecodingOptions(**LOOP, **REPETITION, **BEAM, **SAMPLING, **COMPILED, num_alternatives=2)
EXPECTED_OPTIONS = {
    GREEDY_SIGNATURE: {"decoder": "greedy", **LOOP, **COMPILED, **REPETITION},
    BEAM_SIGNATURE: {"decoder": "beam_search", **LOOP, **COMPILED, **REPETITION, **BEAM},
    ALIGNMENTS_SIGNATURE: {"decoder": "greedy", **LOOP, **COMPILED, **REPETITION},
    N_BEST_SIGNATURE: {
        "decoder": "beam_search",
        **LOOP,
        **COMPILED,
        **REPETITION,
        **BEAM,
        "num_hypotheses": 3,
    },
    SCORE_SIGNATURE: {"decoder": "forced"},
    SAMPLE_SIGNATURE: {"decoder": "sampling", **LOOP, **PLAIN, **REPETITION, **SAMPLING},
    PREFIX_SIGNATURE: {"decoder": "beam_search_with_prefix", **LOOP, **PLAIN, **REPETITION, **BEAM},
    ALTERNATIVES_SIGNATURE: {
        "decoder": "alternatives",
        **LOOP,
        **PLAIN,
        **REPETITION,
        **BEAM,
        "num_alternatives": 2,
    },
}


@pytest.mark.parametrize("record", SIGNATURES, ids=lambda record: record.name)
def test_each_record_names_a_translator_method_taking_its_inputs(record):
    """The export calls the method with the inputs in the record's order: its parameters must be
    the inputs' names, in that order."""
    method = getattr(Translator, record.method)
    assert callable(method) and not record.method.startswith("_")
    parameters = list(inspect.signature(method).parameters)
    assert parameters == ["self", *record.input_names]


def test_the_public_tables_are_read_from_the_registry():
    assert serving_contract.SIGNATURE_NAMES == tuple(record.name for record in SIGNATURES)
    assert len(set(serving_contract.SIGNATURE_NAMES)) == len(SIGNATURES)
    for record in SIGNATURES:
        assert serving_contract.SIGNATURE_INPUTS[record.name] == record.input_names
        assert serving_contract.SIGNATURE_OUTPUTS[record.name] == record.output_names
        assert record.inputs[0].name == TEXT_INPUT
    assert serving_contract.TRANSLATION_OUTPUTS == ("translation", "score")


def test_each_record_reads_decoding_options_that_exist():
    fields = {field.name for field in dataclasses.fields(DecodingOptions)}
    for record in SIGNATURES:
        assert set(record.options) <= fields, record.name


def test_the_traced_options_are_what_the_export_recorded_before_the_registry():
    assert export.signature_options(OPTIONS) == EXPECTED_OPTIONS
    # Without XLA, no signature is compiled and none records a bound.
    plain = export.signature_options(
        dataclasses.replace(OPTIONS, jit_compile=False, xla_max_batch=None)
    )
    for name, traced in plain.items():
        assert traced.get("jit_compile", False) is False and "xla_max_batch" not in traced, name
    assert export.compiled_signatures(OPTIONS) == [
        GREEDY_SIGNATURE,
        BEAM_SIGNATURE,
        ALIGNMENTS_SIGNATURE,
        N_BEST_SIGNATURE,
    ]
    # n_best records the number it returns, the beam width when num_hypotheses is None.
    n_best = export.signature_options(dataclasses.replace(OPTIONS, num_hypotheses=2))
    assert n_best[N_BEST_SIGNATURE]["num_hypotheses"] == 2


@pytest.mark.parametrize("record", SIGNATURES, ids=lambda record: record.name)
def test_the_warmup_inputs_are_one_value_per_text_of_each_inputs_dtype(record):
    texts = ["Hola.", "¿Dónde está?", ""]
    values = export.warmup_inputs(record.name, texts)
    assert list(values) == list(record.input_names)
    for item in record.inputs:
        proto = tf.make_tensor_proto(values[item.name], tf.as_dtype(item.dtype))
        assert tf.make_ndarray(proto).shape == (len(texts),), item.name
    assert values[TEXT_INPUT] == [text.encode("utf-8") for text in texts]
    assert [spec.dtype for spec in input_signature(record.name)] == [
        tf.as_dtype(item.dtype) for item in record.inputs
    ]


def test_every_client_flag_of_the_registry_is_an_option_of_the_client():
    """`serving.client` reads a flag as the argument of the flag's name (`--n_best`: `n_best`),
    given when neither None nor False."""
    records = [*SIGNATURES, *INPUTS.values()]
    flags = {record.client_flag for record in records if record.client_flag}
    for flag in flags:
        args = client.build_arg_parser().parse_args([flag, "1"])
        assert getattr(args, flag.removeprefix("--")) not in (None, False), flag
    chosen = [record.client_flag for record in SIGNATURES if record.client_flag]
    assert len(set(chosen)) == len(chosen)


def test_a_record_must_take_text_first_and_read_jit_compile_to_be_compiled():
    greedy = serving_contract.SIGNATURES_BY_NAME[GREEDY_SIGNATURE]
    with pytest.raises(ValueError, match="first input must be 'text'"):
        dataclasses.replace(greedy, inputs=greedy.inputs[1:])
    with pytest.raises(ValueError, match="reads jit_compile"):
        dataclasses.replace(greedy, options=("max_length_ratio",))
    assert isinstance(greedy, Signature)
