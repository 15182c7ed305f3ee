"""tf2onnx's command line (``python -m tf2onnx.convert``) with its memory bounded: the same code run with the same
arguments, the garbage it leaves collected as it goes.

tf2onnx's ONNX optimizers (tf2onnx/optimizer/__init__.py, ``optimize_graph``) deep-copy the whole graph, weights
included, before each of its 12 optimizers on every pass, and drop the copy before; its graph objects hold reference
cycles (a node and its graph), which Python frees only when its cyclic collector runs, and that runs by counts of
objects, not bytes, so the dropped copies of the weights pile up. Here, after each optimizer and each of the
conversion's stages (freezing, grappler, the TF -> ONNX mapping), the collector runs and the freed pages go back
(``common.memory.trim``) whenever the process grew by ``GROWTH_BYTES`` since it last did: a small model pays nothing.
What the imports made (TensorFlow's and tf2onnx's modules) is frozen out of the collector first (``gc.freeze``), so
that each collection walks only the conversion's own objects: EfficientNetB0 converted in 21.9 s with them walked
at every collection, 14.1 s frozen (the same peak, 0.96-0.99 GiB; ``/usr/bin/time`` on this command, issue 37).

Freezing (``tf_loader.from_function``) is tf2onnx's own steps with the copies of the weights each leaves dropped
before the next one makes its own (``from_function`` here), and TensorFlow's making of the frozen function given the
graph with its large constants standing in (``frozen_graph_def``: it reads their shapes, not their values); grappler
runs on the frozen GraphDef alone, once the SavedModel is let go (``from_saved_model``), with the weights standing in
where that gives grappler's own graph (``grappler.py``); the graph, once imported, mapped and optimized, is let go as
the next stage has its own (``convert_common``). tf2onnx's nodes keep their attributes twice (``Node.attr`` and a
stale copy in the NodeProto) and protobuf keeps what a message's cleared fields held until the message goes: nodes are
copied without the stale copy and updated into a fresh NodeProto that ``Node.attr`` then holds (``node_deepcopy``,
``_update_proto``). Measured on ResNet50 (98 MB of weights), each stage's peak as tf2onnx runs it: loaded 0.80 GiB,
frozen 1.93, grappler 3.01, its ONNX optimizers 6.82, saved 7.31; here (``PARITYGATE_CONVERT_TRACE=1``): frozen 1.02,
grappler 1.02, the TF -> ONNX mapping 1.35, the ONNX optimizers 1.19; the real-size models: docs/measured.md,
"Real-size models".

    python -m paritygate.backend.onnx.artifacts.convert --saved-model DIR --signature_def serving_default \\
        --opset 17 --output model.onnx        # tf2onnx.convert's arguments, as they are
"""

import copy
import functools
import gc
import os
import sys

from paritygate.common.memory import trim

# EfficientNetB0's conversion (3 runs each, alternated, bytecode cached, 2026-11-29): 64 MiB peaked at 0.793-0.795 GiB
# in 8.7-10.1 s, 32 MiB at 0.771-0.789 GiB in 9.6-10.9 s; the gate's budget for it is 0.80 GiB (docs/measured.md)
GROWTH_BYTES = 32 * 2**20
_LAST = [0]


def resident():
    """This process's resident set in bytes (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def collect(force=False, stage=None):
    """Collect the cyclic garbage and give its pages back when the process grew by ``GROWTH_BYTES`` since the last
    time (``force``: now). ``PARITYGATE_CONVERT_TRACE`` set: each ``stage`` and the memory then, on stderr."""
    now, collected = resident(), force or resident() - _LAST[0] > GROWTH_BYTES
    if collected:
        gc.collect()
        trim()
        _LAST[0] = resident()
    if stage and os.environ.get("PARITYGATE_CONVERT_TRACE"):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        after = f", collected: {_LAST[0] / 2**30:.2f} GiB" if collected else ""
        print(f"paritygate convert: {stage}: resident {now / 2**30:.2f} GiB{after}, peak {peak:.2f} GiB",
              file=sys.stderr, flush=True)


def _collecting(function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            collect(stage=function.__qualname__)

    return wrapped


def from_function(func, input_names, output_names, large_model=False):
    """tf2onnx's ``tf_loader.from_function``, the same steps on the same values, each one's copy of the weights
    dropped before the next one makes its own (module doc). Where tf2onnx handles a freezing error or a large model
    itself, its own function runs."""
    from tf2onnx import tf_loader

    if large_model:
        return _FROM_FUNCTION[0](func, input_names, output_names, large_model)
    try:
        graph_def = frozen_graph_def(func)
    except ValueError:
        return _FROM_FUNCTION[0](func, input_names, output_names, large_model)  # tf2onnx's repair of freezing
    collect(force=True, stage="frozen GraphDef")
    graph_def = tf_loader.fix_freezing_errors_part2(graph_def)
    import tensorflow as tf

    with tf.Graph().as_default() as tf_graph, tf_loader.tf_session(graph=tf_graph) as sess:
        tf.import_graph_def(_stand_ins(graph_def)[0], name="")  # the inputs' types are read, no weight
        input_names = tf_loader.inputs_without_resource(sess, input_names)
    del tf_graph, sess
    collect(force=True, stage="inputs read")
    if _SAVED_MODEL and not tf_loader.get_hash_table_info(graph_def):
        _SAVED_MODEL[0] = (input_names, output_names)  # grappler once the SavedModel is let go: from_saved_model
        return graph_def
    return _optimized(input_names, output_names, graph_def)


STAND_IN_BYTES = 64 * 2**10  # a float constant this large stands in for itself while the frozen function is made


def frozen_graph_def(func):
    """``convert_variables_to_constants_v2(func, lower_control_flow=False, aggressive_inlining=True)``'s graph as
    ``as_graph_def(add_shapes=True)`` gives it (tf2onnx's freezing), with the weights held once. TensorFlow makes the
    frozen function from a GraphDef holding every weight (``_construct_concrete_function``) and copies it several
    times on the way (ResNet50: 0.87 -> 1.66 GiB in that call alone); the function's making reads no constant's
    values, only their types and shapes, so here it is given the graph with each float constant of
    ``STAND_IN_BYTES`` or more standing in as one value of its shape, and the real values are put back by name."""
    from tensorflow.python.framework import convert_to_constants as freezing

    data = freezing._FunctionConverterDataInEager(func=func, lower_control_flow=False, aggressive_inlining=True)
    full, converted = freezing._replace_variables_by_constants(converter_data=data)
    del data
    collect(force=True, stage="variables replaced")
    light, kept = _stand_ins(full)
    frozen = freezing._construct_concrete_function(func, light, converted)
    graph_def = frozen.graph.as_graph_def(add_shapes=True)
    del frozen, light
    for node in graph_def.node:
        if node.name in kept:
            node.attr["value"].tensor.CopyFrom(kept[node.name])
    return graph_def


def _stand_ins(graph_def):
    """(a copy of ``graph_def`` whose large float constants hold one value of their shape, {name: real value})."""
    from paritygate.backend.onnx.artifacts.grappler import large_floats, stood_in

    kept = {node.name: node.attr["value"].tensor for node in large_floats(graph_def, STAND_IN_BYTES)}
    return stood_in(graph_def, dict.fromkeys(kept, 0.5)), kept  # 0.5: no value is read, here


def _optimized(input_names, output_names, graph_def):
    import tensorflow as tf
    from tf2onnx import tf_loader

    from paritygate.backend.onnx.artifacts import grappler

    with tf.Graph().as_default():  # an empty graph for grappler's metagraph, as the imported one's collections were
        return grappler.optimized(input_names, output_names, graph_def, tf_loader.tf_optimize, STAND_IN_BYTES)


def from_saved_model(*args, **kwargs):
    """tf2onnx's ``tf_loader.from_saved_model``, grappler run on the frozen graph once it has returned, so that the
    loaded SavedModel (its variables, its functions) is let go first. Only where the graph has no hash table, whose
    placeholders tf2onnx replaces after freezing (then grappler runs where tf2onnx runs it, in ``from_function``)."""
    _SAVED_MODEL[:] = [None]
    try:
        result = _FROM_SAVED_MODEL[0](*args, **kwargs)
        pending = _SAVED_MODEL[0]
    finally:
        _SAVED_MODEL.clear()
    collect(force=True, stage="SavedModel let go")
    if pending is not None:
        result[0] = _optimized(*pending, result[0])
    return result


def convert_common(frozen_graph, name="unknown", large_model=False, output_path=None, output_frozen_graph=None,
                   custom_ops=None, custom_op_handlers=None, optimizers=None, **kwargs):
    """tf2onnx's ``convert._convert_common``, the same calls on the same values, each copy of the weights let go once
    the next stage has its own: the GraphDef once imported (emptied in place: ``main`` still names it), the imported
    graph once mapped to ONNX, the mapped graph once the first optimizer has copied it, the optimized graph once its
    ModelProto is made. Where tf2onnx does more (a large model, custom ops, TFLite, TF.js, a frozen graph written
    out), its own function runs."""
    if large_model or output_frozen_graph or custom_ops or kwargs.get("tflite_path") or kwargs.get("tfjs_path"):
        return _CONVERT_COMMON[0](frozen_graph, name, large_model, output_path, output_frozen_graph, custom_ops,
                                  custom_op_handlers, optimizers, **kwargs)
    import tensorflow as tf
    from tf2onnx import constants, convert, optimizer, utils

    with tf.Graph().as_default() as tf_graph:
        tf.import_graph_def(frozen_graph, name="")
        frozen_graph.Clear()
        mapped = [convert.process_tf_graph(tf_graph, custom_op_handlers=custom_op_handlers, **kwargs)]
    del tf_graph
    mapped[0].update_proto()  # each node's values held once (``_update_proto``), as the mapping left them
    collect(force=True, stage="TensorFlow graph let go")
    catch = os.environ.get(constants.ENV_TF2ONNX_CATCH_ERRORS, "TRUE").upper() == "TRUE"
    optimized = optimizer.optimize_graph(mapped.pop(), catch, optimizers=optimizers)
    collect(force=True, stage="optimized")  # the optimizers' last copies, before the ModelProto's own
    model_proto = optimized.make_model(f"converted from {name}")
    del optimized
    collect(force=True, stage="ModelProto made")
    if output_path:
        utils.save_protobuf(output_path, model_proto)
    return model_proto, None


_FROM_FUNCTION, _FROM_SAVED_MODEL, _CONVERT_COMMON = [], [], []  # tf2onnx's own
_SAVED_MODEL = []  # inside from_saved_model: [None], or [(input names, output names)] grappler has yet to run with


def _bare(op):
    """A copy of the NodeProto ``op`` without its attributes."""
    bare = type(op)()
    for field, value in op.ListFields():
        if field.name == "attribute":
            continue
        if hasattr(value, "extend"):
            getattr(bare, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(bare, field.name).CopyFrom(value)
        else:
            setattr(bare, field.name, value)
    return bare


def node_deepcopy(node, memo):
    """``copy.deepcopy`` of a tf2onnx ``Node`` with its NodeProto's attributes left out: they are a stale copy of
    ``Node.attr`` (what tf2onnx reads and changes), written over by ``update_proto`` before the NodeProto is read."""
    copied = type(node).__new__(type(node))
    memo[id(node)] = copied
    copied.__dict__.update(copy.deepcopy({k: v for k, v in vars(node).items() if k != "_op"}, memo))
    copied._op = _bare(node._op)
    return copied


def _update_proto(update_proto):
    """tf2onnx's ``Node.update_proto`` on a fresh NodeProto, whose attributes ``Node.attr`` then holds: protobuf's C
    implementation keeps a message's cleared fields in its memory until the message goes, so each update otherwise
    adds a copy of the weights that stays, and ``Node.attr`` held one more."""
    @functools.wraps(update_proto)
    def wrapped(node, external_tensor_storage=None):
        node._op = _bare(node._op)
        update_proto(node, external_tensor_storage)
        if external_tensor_storage is None:  # with one, the NodeProto's values are moved out to it
            for attr in node._op.attribute:
                node._attr[attr.name] = attr

    return wrapped


def install():
    """Collect after each ONNX optimizer and each conversion stage of tf2onnx; freeze leaner; copy and update tf2onnx's
    nodes without the stale copies of their attributes (module doc)."""
    from tf2onnx import convert, graph, optimizer, tf_loader, tfonnx

    if not _FROM_FUNCTION:
        _FROM_FUNCTION.append(tf_loader.from_function)
        _FROM_SAVED_MODEL.append(tf_loader.from_saved_model)
        _CONVERT_COMMON.append(convert._convert_common)
        tf_loader.from_function, tf_loader.from_saved_model = from_function, from_saved_model
        convert._convert_common = convert_common
        graph.Node.__deepcopy__ = node_deepcopy
        graph.Node.update_proto = _update_proto(graph.Node.update_proto)
    for factory in optimizer._get_optimizers().values():
        factory.optimize = _collecting(factory.optimize)
    for module, name in ((tf_loader, "tf_optimize"), (convert, "process_tf_graph"),
                         (tfonnx, "process_parsed_graph")):  # not optimize_graph: its arguments would stay
        setattr(module, name, _collecting(getattr(module, name)))


def main(argv):
    install()
    from tf2onnx import convert

    gc.freeze()  # what the imports made stays: each collection walks only the conversion's own objects

    sys.argv = ["tf2onnx.convert", *argv]
    convert.main()


if __name__ == "__main__":
    main(sys.argv[1:])
