"""What tests read off a traced or exported TensorFlow graph."""

import collections


def products_with_bias(graph_def):
    """`{function: count}` of the BiasAdd nodes fed directly by a MatMul, in a graph (`""`) and
    each function of its library: the pattern TensorFlow's CPU rewrites fuse into one oneDNN
    product. Functions without one are left out."""
    node_lists = {"": graph_def.node}
    node_lists.update(
        {function.signature.name: function.node_def for function in graph_def.library.function}
    )
    counts = collections.Counter()
    for name, nodes in node_lists.items():
        ops = {node.name: node.op for node in nodes}
        for node in nodes:
            if node.op == "BiasAdd":
                source = node.input[0].lstrip("^").split(":")[0]
                counts[name] += ops.get(source) == "MatMul"
    return +counts
