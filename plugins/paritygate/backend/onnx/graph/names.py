"""Small graph helpers shared by the ONNX builders."""

from paritygate.backend.onnx.graph import scopes


def tensor_names(model):
    """Every name a model uses, in every graph (subgraphs included): initializers, inputs, outputs, value_info,
    node inputs/outputs and node names."""
    names = set()
    for g in scopes.graphs(model.graph):
        names |= ({t.name for t in g.initializer} | {v.name for v in [*g.input, *g.output, *g.value_info]}
                  | {t for n in g.node for t in [*n.input, *n.output, n.name]})
    return names


def fresh_name(name, taken):
    """``name``, or ``name1``, ``name2``... : the first not in ``taken`` (which it joins)."""
    candidate, k = name, 0
    while candidate in taken:
        k += 1
        candidate = f"{name}{k}"
    taken.add(candidate)
    return candidate
