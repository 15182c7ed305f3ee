"""Grappler (tf2onnx's ``tf_optimize``) on the frozen graph with its weights standing in, where that gives grappler's
own graph, checked; grappler on the real graph wherever it is not.

TensorFlow's ``OptimizeGraph`` holds 13 copies of the weights while it runs (ResNet50's 98 MB: 0.9 -> 2.1 GiB).
Grappler reads a weight's values only where it computes with them: constant folding of a node whose inputs are all
constants, and rewrites that merge a constant into a weight (``MulConvPushDown``: a Conv2D's filter times the Mul
after it). Here a float constant of ``convert.STAND_IN_BYTES`` or more stands in as one value of its shape when every
path from it through nodes of constant inputs goes through Identity and Reshape alone, which move its values without
changing them (``carried``). Grappler then runs twice: every stand-in 2 in one run, a distinct negative value in the
other. The two graphs must agree node for node except where a stand-in's value was carried (the constant, or an
Identity or Reshape of it that grappler folded: its real values go back, in grappler's shape) or merged into a filter
(``_merged``: the product is computed again from the real filter). A graph that differs anywhere else read a
stand-in's value, and grappler runs again on the real graph. Measured: docs/measured.md, "Real-size models"."""

import collections

FORWARDING = ("Identity", "Reshape")
MERGED = "/merged_input"  # grappler's MulConvPushDown: the constant <conv>/merged_input = <conv>'s filter * the Mul's


def optimized(input_names, output_names, graph_def, tf_optimize, stand_in_bytes):
    """grappler's graph for ``graph_def`` (``tf_optimize``: tf2onnx's), weights standing in where it is the same."""
    plan = carried(graph_def, stand_in_bytes)
    if plan:
        values = _sentinels(plan)
        runs = [tf_optimize(list(input_names), list(output_names), stood_in(graph_def, held)) for held in values]
        if _restored(graph_def, plan, runs, values):
            return runs[0]
        del runs  # half restored: let go before grappler runs on the real graph
    return tf_optimize(list(input_names), list(output_names), graph_def)


def carried(graph_def, stand_in_bytes):
    """{name of a large float constant that may stand in: the Identity and Reshape nodes that carry its values}."""
    nodes = {node.name: node for node in graph_def.node}
    consumers = collections.defaultdict(list)
    for node in graph_def.node:
        for position, name in enumerate(_data_inputs(node)):
            consumers[name].append((node, position))
    constant = _constant(nodes)
    plan = {}
    for node in large_floats(graph_def, stand_in_bytes):
        members, todo, free = [], [node.name], True
        while todo and free:
            for user, position in consumers[todo.pop()]:
                if constant[user.name] and user.op in FORWARDING and position == 0:
                    members.append(user.name)
                    todo.append(user.name)
                elif constant[user.name]:
                    free = False
                    break
        if free:
            plan[node.name] = members
    return plan


def large_floats(graph_def, stand_in_bytes):
    """The float constants of ``graph_def`` holding ``stand_in_bytes`` or more: the ones that may stand in."""
    from tensorflow.core.framework import types_pb2

    return [node for node in graph_def.node if node.op == "Const" and "value" in node.attr
            and node.attr["value"].tensor.dtype == types_pb2.DT_FLOAT
            and node.attr["value"].tensor.ByteSize() >= stand_in_bytes]


def _data_inputs(node):
    return [name.split(":")[0] for name in node.input if not name.startswith("^")]


def _constant(nodes):
    """{node name: whether its data inputs come, through any nodes, from constants alone} (inside a loop: no)."""
    known, visiting = {}, set()
    for start in nodes:
        stack = [start]
        while stack:
            name = stack[-1]
            node = nodes.get(name)
            if name in known:
                stack.pop()
            elif node is None or node.op in ("Const", "Placeholder") or not _data_inputs(node):
                known[name] = node is not None and node.op == "Const"
                stack.pop()
            elif name not in visiting and any(i not in known for i in _data_inputs(node)):
                visiting.add(name)
                stack.extend(i for i in _data_inputs(node) if i not in known and i not in visiting)
            else:  # its inputs done, or waiting on a node still being walked: a loop, never folded here
                visiting.discard(name)
                known[name] = all(known.get(i, False) for i in _data_inputs(node))
                stack.pop()
    return known


def _sentinels(plan):
    """Two {constant: the one value it stands in as}: 2 in the first run (a power of two: a product with it is exact),
    a distinct negative value in the second."""
    import numpy as np

    names = sorted(plan)
    step = 1.0 / (len(names) + 1)
    return [dict.fromkeys(names, 2.0), {name: float(np.float32(-3.0 - k * step)) for k, name in enumerate(names)}]


def stood_in(graph_def, values):
    """A copy of ``graph_def`` whose constants named in ``values`` hold that one value, in their shape."""
    light = type(graph_def)()
    light.versions.CopyFrom(graph_def.versions)
    light.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name not in values:
            light.node.add().CopyFrom(node)
            continue
        copy = light.node.add(name=node.name, op=node.op, device=node.device, input=node.input)
        for key, attr in node.attr.items():
            if key != "value":
                copy.attr[key].CopyFrom(attr)
        for field in ("experimental_debug_info", "experimental_type"):
            if node.HasField(field):
                getattr(copy, field).CopyFrom(getattr(node, field))
        real, stand_in = node.attr["value"].tensor, copy.attr["value"].tensor
        stand_in.dtype = real.dtype
        stand_in.tensor_shape.CopyFrom(real.tensor_shape)
        stand_in.float_val.append(values[node.name])
    return light


def _restored(graph_def, plan, runs, values):
    """Put the real values back into the first run's graph where the two runs carried a stand-in, or multiplied it
    by a constant (``_merged``); False where they differ anywhere else (the first run's graph is then left half
    restored, and not used)."""
    (first, second), (values_1, values_2) = runs, values
    if len(first.node) != len(second.node):
        return False
    nodes = {node.name: node for node in graph_def.node}
    origin = {member: name for name, members in plan.items() for member in (name, *members)}
    for a, b in zip(first.node, second.node):
        if a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True):
            continue
        if a.name != b.name or a.op != "Const":
            return False
        held, name = a.attr["value"].tensor, origin.get(a.name)
        real = nodes[name].attr["value"].tensor if name else None
        if name and _holds(held, values_1[name]) and _holds(b.attr["value"].tensor, values_2[name]) \
                and _count(held.tensor_shape) == _count(real.tensor_shape):
            shape = type(held.tensor_shape)()
            shape.CopyFrom(held.tensor_shape)
            held.CopyFrom(real)
            held.tensor_shape.CopyFrom(shape)
        elif not _merged(a, b, nodes, origin, values_2):
            return False
    return True


def _merged(a, b, nodes, origin, values_2):
    """``a``/``b``, the same MulConvPushDown constant in the two runs, given its real values: the filter's real values
    times the Mul's, computed as TensorFlow's Mul computes them (IEEE float32 products). The Mul's values are the first
    run's divided by 2; the second run's must be exactly the stand-in times them. Subnormal values (which TensorFlow may
    flush to zero) anywhere: not given (False)."""
    import numpy as np
    from tensorflow.python.framework import tensor_util

    conv = nodes.get(a.name[: -len(MERGED)]) if a.name.endswith(MERGED) else None
    name = origin.get(conv.input[1].split(":")[0]) if conv is not None and len(conv.input) > 1 else None
    if name is None:
        return False
    weights = tensor_util.MakeNdarray(nodes[name].attr["value"].tensor).ravel()
    first, second = (tensor_util.MakeNdarray(n.attr["value"].tensor) for n in (a, b))
    if first.dtype != np.float32 or first.shape != second.shape or first.size != weights.size:
        return False
    by = first.ravel() / np.float32(2)
    merged = weights * by
    tiny = np.finfo(np.float32).tiny
    if any(((x != 0) & (np.abs(x) < tiny)).any() for x in (weights, by, merged, second)) \
            or not np.array_equal(second.ravel(), np.float32(values_2[name]) * by):
        return False
    a.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(merged.reshape(first.shape)))
    return True


def _holds(tensor, value):
    """Whether the float tensor holds ``value`` alone, however grappler wrote it."""
    import numpy as np
    from tensorflow.core.framework import types_pb2

    if tensor.dtype != types_pb2.DT_FLOAT:
        return False
    if tensor.tensor_content:
        return bool((np.frombuffer(tensor.tensor_content, np.float32) == np.float32(value)).all())
    return len(tensor.float_val) == 1 and np.float32(tensor.float_val[0]) == np.float32(value)


def _count(shape):
    count = 1
    for dim in shape.dim:
        count *= dim.size
    return count
