"""Issue 15, cost: an alternative to the strict rewrite's Cast pairs, measured and not taken. Every
Cast(FLOAT16) -> Cast(FLOAT) pair of a strict artifact is replaced by FP32 arithmetic that rounds to FP16 (a
Veltkamp split to 11 significant bits, then a 2**112 scale there and back, so that |x| >= 65520 overflows to inf as
in FP16; subnormals keep 11 bits, which FP16 does not); both are timed against the FP32 artifact (median of 200
calls at batch 8, three rounds). The hope was that ONNX Runtime keeps Mul/Sub in its NCHWc layout where it
cannot keep a Cast; it does not.

    .venv/bin/python docs/measure_rounding.py STRICT.onnx FP32.onnx   # e.g. mobilenet's, from $PARITYGATE_CACHE/onnx
"""
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def veltkamp(path, out):
    m = onnx.load(path)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    consts = []
    def c(name, v):
        consts.append(numpy_helper.from_array(np.array(v, np.float32), name)); return name
    C = c("vk_c", 8193.0)          # 2**13 + 1: 24 - 11 = 13 bits split off
    UP = c("vk_up", 2.0**112)       # 65520 * 2**112 rounds to >= 2**128: inf in fp32
    DOWN = c("vk_down", 2.0**-112)
    new = []
    pairs = 0
    for n in g.node:
        if n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT and n.input[0] in prod \
                and prod[n.input[0]].op_type == "Cast" and prod[n.input[0]].attribute[0].i == TensorProto.FLOAT16:
            src = prod[n.input[0]].input[0]; o = n.output[0]; p = o + "__vk"
            new += [helper.make_node("Mul", [src, C], [p + "t"]),
                    helper.make_node("Sub", [p + "t", src], [p + "d"]),
                    helper.make_node("Sub", [p + "t", p + "d"], [p + "h"]),
                    helper.make_node("Mul", [p + "h", UP], [p + "u"]),
                    helper.make_node("Mul", [p + "u", DOWN], [o])]
            pairs += 1
        else:
            new.append(n)
    # drop narrow casts no one reads any more
    reads = {i for n in new for i in n.input} | {o.name for o in g.output}
    new = [n for n in new if not (n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT16 and n.output[0] not in reads)]
    del g.node[:]; g.node.extend(new); g.initializer.extend(consts)
    onnx.save(m, out)
    return pairs

def sess(p, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    o = ort.SessionOptions(); o.log_severity_level = 3; o.graph_optimization_level = level
    return ort.InferenceSession(p, o, providers=["CPUExecutionProvider"])

def med(s, feed, n=200):
    s.run(None, feed); t = []
    for _ in range(n):
        a = time.perf_counter(); s.run(None, feed); t.append(time.perf_counter() - a)
    return np.median(t) * 1e3

strict_p, fp32_p = sys.argv[1], sys.argv[2]
import tempfile

vk = tempfile.mkdtemp() + "/veltkamp.onnx"
print("pairs", veltkamp(strict_p, vk))
S, V, F = sess(strict_p), sess(vk), sess(fp32_p)
i = S.get_inputs()[0]
shape = [8 if not isinstance(d, int) else d for d in i.shape]
x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
a, b = S.run(None, {i.name: x}), V.run(None, {i.name: x})
for u, v in zip(a, b):
    print("max |strict - veltkamp|", float(np.max(np.abs(u.astype(np.float64) - v))), "equal", np.array_equal(u, v))
for r in range(3):
    ms = {k: med(s, {s.get_inputs()[0].name: x}) for k, s in (("fp32", F), ("strict", S), ("veltkamp", V))}
    print({k: round(v, 4) for k, v in ms.items()}, "strict/fp32 {:.2f} veltkamp/fp32 {:.2f}".format(ms["strict"] / ms["fp32"], ms["veltkamp"] / ms["fp32"]))
