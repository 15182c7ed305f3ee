"""TFMA's SymmetricFlipRate beside ``paritygate shadow`` on the same examples (docs/shadow.md, "Measured").

TFMA 0.52 does not install into the suite's environment cleanly (it requires ``tensorflow``, the suite
``tensorflow-cpu``: two distributions of one package), so it runs from a scratch venv:

    uv venv /tmp/tfma && VIRTUAL_ENV=/tmp/tfma uv pip install tensorflow-model-analysis 'tensorflow-cpu==2.21.*' 'apache-beam==2.77.*'
    PYTHONPATH=plugins:. .venv/bin/python docs/tfma_side_by_side.py predict DATA_GLOB OUT.npz    # suite venv
    /tmp/tfma/bin/python docs/tfma_side_by_side.py tfma OUT.npz                                 # scratch venv

``predict`` runs the bundled mobilenet's TF reference and the flipping candidate of tests/shadow/flip_handlers.py
(fp32 ONNX, top-2 swapped for ~1 in 200 inputs) on the records, as a bare loop; ``tfma`` gives TFMA the two
models' class scores as features (model-agnostic: ``prediction_key``) and computes SymmetricFlipRate per class
(one-vs-rest binarization of the 10 classes at TFMA's threshold 0.5: TFMA's flip rates are for binary outputs).
"""

import json
import sys
import time


def predict(pattern, out):
    import numpy as np

    from paritygate.backend.tf.runner import TfRunner
    from paritygate.models.bundled import fixtures_dir
    from paritygate.models.config import load_config
    from paritygate.shadow.read import Layout, element, match, tfrecord_rows
    from tests.shadow import flip_handlers

    spec = next(m for m in load_config(fixtures_dir() / "parity.toml") if m.name == "mobilenet")
    ref = TfRunner(spec.reference, spec.signature).activate()
    (name,) = ref.output_names
    handler = flip_handlers.flipper(1, spec.max_batch, spec, [name])
    model = handler.load_model()
    layout = Layout.of(spec, slice_feature="label")
    images, labels = [], []
    for path in match(pattern):
        for i, get in tfrecord_rows(path):
            _, feed, label, _ = element(layout, get, i)
            images.append(feed["image"])
            labels.append(label)
    x = np.stack(images)
    base = np.concatenate([ref.infer({"image": x[i:i + 64]})[name] for i in range(0, len(x), 64)])
    cand = np.stack([r.inference[name] for i in range(0, len(x), 8)
                     for r in handler.run_inference(list(x[i:i + 8]), model)])
    np.savez(out, base=base, cand=cand, label=np.array(labels))
    flips = int((base.argmax(1) != cand.argmax(1)).sum())
    print(json.dumps({"examples": len(x), "top1_flips": flips, "top1_flip_rate": flips / len(x)}))


def tfma(npz):
    import tempfile

    import numpy as np
    import tensorflow as tf
    from tensorflow_model_analysis.api.model_eval_lib import run_model_analysis
    from tensorflow_model_analysis.proto import config_pb2 as tfma_

    data = np.load(npz)
    folder = tempfile.mkdtemp()
    with tf.io.TFRecordWriter(f"{folder}/data.tfrecord") as w:
        for b, c, y in zip(data["base"], data["cand"], data["label"]):
            feature = {"base": tf.train.Feature(float_list=tf.train.FloatList(value=b)),
                       "cand": tf.train.Feature(float_list=tf.train.FloatList(value=c)),
                       "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    config = tfma_.EvalConfig(
        model_specs=[tfma_.ModelSpec(name="candidate", prediction_key="cand", label_key="label"),
                     tfma_.ModelSpec(name="baseline", prediction_key="base", label_key="label", is_baseline=True)],
        metrics_specs=[tfma_.MetricsSpec(metrics=[tfma_.MetricConfig(class_name="SymmetricFlipRate")],
                                         binarize=tfma_.BinarizationOptions(class_ids={"values": list(range(10))}),
                                         model_names=["candidate", "baseline"])],
        slicing_specs=[tfma_.SlicingSpec()])
    start = time.perf_counter()
    result = run_model_analysis(eval_config=config, data_location=f"{folder}/data.tfrecord",
                                      output_path=f"{folder}/out")
    seconds = time.perf_counter() - start
    from tensorflow_model_analysis import load_metrics

    del result
    rates = {}
    for metrics in load_metrics(f"{folder}/out"):
        for kv in metrics.metric_keys_and_values:
            if "flip" in kv.key.name.lower():
                rates[f"class {kv.key.sub_key.class_id.value} {kv.key.name} ({kv.key.model_name})"] = \
                    kv.value.double_value.value
    print(json.dumps({"seconds": round(seconds, 1), "symmetric_flip_rate_per_class": rates}, default=str))


if __name__ == "__main__":
    {"predict": predict, "tfma": tfma}[sys.argv[1]](*sys.argv[2:])
