"""What every layer shares and none owns, below `model` in the import order.

Standard library only, so that importing it runs nothing else: the model server imports it
without the model code.

* `serving_contract`: the exported translator's signature names, input and output keys, and the
  path of its export info.
* `flags`: the boolean command-line value parser of every CLI.
* `startup`: TensorFlow imported without its C++ start-up notices.
"""
