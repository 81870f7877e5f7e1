"""What every layer shares and none owns, below `model` in the import order.

Standard library only, so that importing it runs nothing else: the model server imports it
without the model code.

* `serving_contract`: the registry of the exported translator's signatures (each a record of
  its name, inputs, outputs, `Translator` method, decoding options, XLA and warmup), their input
  and output keys, and the path of its export info.
* `flags`: the boolean command-line value parser of every CLI.
* `startup`: TensorFlow imported without its C++ start-up notices.
"""
