"""What a TensorRT(-RTX) build log says, made data: the engine's layers, its warnings, a parse error's node and op.

With ``ProfilingVerbosity.DETAILED`` the builder logs, at VERBOSE, one "Layers:" message with a line per kernel::

    Name: conv0_myl0_2, LayerType: correlation, Inputs: [ { Name: t, Dimensions: [-1,3,8,8], ..., Datatype: Half,
    ... }], Constants: [...], Outputs: [ {...} ], TacticName: ..., StreamId: 0, Metadata: [ONNX Layer: conv0]

(TensorRT-RTX 1.7: several ONNX nodes fused into one kernel are listed in its Metadata, separated by U+001F).
Pure Python: nothing here imports TensorRT.
"""

import re

# The datatypes a kernel of each precision computes in (the builder's names).
DATATYPES = {"fp32": ("Float",), "fp16": ("Half",), "int8": ("Int8",)}
# Layer types that compute nothing on values: shape arithmetic the builder adds.
NOT_KERNELS = {"shape_call"}

_LAYER = re.compile(r"^Name: (?P<name>.*?), LayerType: (?P<type>[^,]*), Inputs: \[(?P<inputs>.*?)\], "
                    r"Constants: \[(?P<constants>.*?)\], Outputs: \[(?P<outputs>.*?)\], TacticName: (?P<tactic>[^,]*),"
                    r".*?Metadata: ?(?P<meta>.*)$")
_TENSOR = re.compile(r"Name: (?P<name>[^,]*), Dimensions: \[(?P<dims>[^\]]*)\].*?Datatype: (?P<dtype>\w+)")
_NODE = re.compile(r"\[ONNX Layer: ([^\]\x1f]+)\]")
_PARSE = re.compile(r"While parsing node number (?P<index>\d+) \[(?P<op>\w+) -> \"(?P<output>[^\"]*)\"\]")
_NODE_NAME = re.compile(r"Node name: (?P<name>.*)")
_IN_NODE = re.compile(r"In node (?P<index>-?\d+) with name: (?P<name>.*?) and operator: (?P<op>\w*) ")


def parse_layers(messages):
    """[{"name", "type", "tactic", "inputs": [[tensor, datatype]], "outputs": [...], "onnx_nodes": [...]}] from the
    builder's "Layers:" messages (the last one wins: one build, one report)."""
    if not messages:
        return []
    out = []
    for line in messages[-1].split("\n"):
        found = _LAYER.match(line)
        if not found:
            continue
        out.append({"name": found["name"], "type": found["type"], "tactic": found["tactic"].strip(),
                    "inputs": _tensors(found["inputs"]), "outputs": _tensors(found["outputs"]),
                    "onnx_nodes": _NODE.findall(found["meta"])})
    return out


def _tensors(text):
    return [[t["name"].strip(), t["dtype"]] for t in _TENSOR.finditer(text)]


def kernels(layers):
    """The layers that compute on values (not the builder's shape arithmetic)."""
    return [layer for layer in layers if layer["type"] not in NOT_KERNELS and layer["outputs"]]


def coverage(layers, precision):
    """Engine-side precision coverage: the share of kernels that compute in ``precision`` (one of their inputs is of
    its datatype) and of the engine's tensors stored in it, with every datatype counted."""
    wanted = DATATYPES[precision]
    found = kernels(layers)
    tensors = {name: dtype for layer in found for name, dtype in layer["inputs"] + layer["outputs"]}
    counted = {}
    for dtype in tensors.values():
        counted[dtype] = counted.get(dtype, 0) + 1
    in_precision = [layer["name"] for layer in found if any(d in wanted for _, d in layer["inputs"])]
    stored = sum(counted.get(d, 0) for d in wanted)
    return {"precision": precision, "datatypes": DATATYPES[precision][0], "kernels": len(found),
            "kernels_in_precision": len(in_precision),
            "kernel_share": round(len(in_precision) / len(found), 4) if found else None,
            "tensors": len(tensors), "tensors_in_precision": stored,
            "tensor_share": round(stored / len(tensors), 4) if tensors else None,
            "tensor_datatypes": dict(sorted(counted.items()))}


def fused_groups(layers):
    """The ONNX nodes each kernel computes, for kernels that compute more than one: the builder's fusions."""
    return [layer["onnx_nodes"] for layer in kernels(layers) if len(layer["onnx_nodes"]) > 1]


_CODE = re.compile(r"^\[(?P<code>\d+)\] (?P<text>.*)$", re.DOTALL)  # "[8] false": the parser's ErrorCode, then its words
_FUNCTION = re.compile(r"In function (?P<function>\w+):")  # "ERROR: onnxOpCheckers.cpp:1130 In function checkDet:"


def parse_error(errors, exception_text, codes=None):
    """{"message", "node", "op", "node_index", "code"} of a parse or build failure from what the builder logged.
    ``codes``: the parser's ErrorCode number -> name (``trt.ErrorCode``, read where TensorRT is imported): the
    last cause reads ``[8] false`` (In function checkDet), which becomes "UNSUPPORTED_NODE (parser error 8, in
    checkDet): false". An unnamed node ("Node name:" empty) keeps its index and op, its name None."""
    node = op = index = None
    for text in errors:
        for pattern in (_PARSE, _IN_NODE):
            found = pattern.search(text)
            if found:
                op, index = found["op"] or op, int(found["index"]) if found["index"] != "-1" else index
                node = found.groupdict().get("name") or node
        named = _NODE_NAME.search(text)
        if named:
            node = named["name"].strip()
    causes = [t for t in errors if "ERROR:" in t or "Assertion failed" in t or "In node" in t] or errors
    message = " ".join(_last_line(t) for t in causes[-2:]) or exception_text
    code = _CODE.match(message)
    name = None
    if code:
        number = int(code["code"])
        name = (codes or {}).get(number, f"parser error {number}")
        function = next((f["function"] for t in causes[-2:] for f in [_FUNCTION.search(t)] if f), None)
        where = f"parser error {number}" + (f", in {function}" if function else "")
        message = f"{name} ({where}): {code['text']}" if name != where else f"{where}: {code['text']}"
    return {"message": message[:800], "node": node or None, "op": op, "node_index": index, "code": name,
            "cannot_run": cannot_run([*errors, exception_text])}


def where(error):
    """Where a rejection happened, for its one line: " at node #1 'name' (op Det)", " at node #1 (unnamed, op Det)"
    (an empty string when the builder named neither node nor op)."""
    if not (error.get("node") or error.get("op")):
        return ""
    index = f"#{error['node_index']} " if error.get("node_index") is not None else ""
    name = f"'{error['node']}' " if error.get("node") else ""
    return f" at node {index}{name}({'unnamed, ' if not name else ''}op {error.get('op')})"


# What a builder that could not run logs, as opposed to a parser or builder that rejected the network: TensorRT-RTX
# 1.7's CPU-only build of tf2onnx's dynamic Pad (SpliceAI 1.3.1) calls into CUDA and logs "cudaError 35: CUDA driver
# version is insufficient for CUDA runtime version"; no CUDA device, a CUDA initialization failure, and the host
# running out of memory are the machine's, not the artifact's.
CANNOT_RUN = (
    (re.compile(r"cudaError\s*\d+|CUDA driver version is insufficient|CUDA initialization failure|"
                r"no CUDA-capable device|cudaErrorNoDevice|cudaErrorInsufficientDriver|Cuda Runtime \("),
     "the builder called CUDA, which this machine does not have"),
    (re.compile(r"std::bad_alloc|[Oo]ut of (?:host )?memory"), "the builder ran out of host memory"),
)


def cannot_run(texts):
    """Why the builder could not run, from what it logged (``texts``), or None: a rejection of the network is the
    artifact's (the parser's or builder's message), these are the machine's (``CANNOT_RUN``)."""
    for pattern, why in CANNOT_RUN:
        if any(pattern.search(text or "") for text in texts):
            return why
    return None


def _last_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return re.sub(r"^\S+\.cpp:\d+: ", "", lines[-1]) if lines else ""


def warnings(messages):
    """The builder's warnings, each once, in order: findings for the report (a layernorm in FP16 that may overflow,
    say)."""
    return list(dict.fromkeys(m.strip() for m in messages if m.strip()))
