"""fixtures/zoo/build.py: rebuilt SavedModels match fixtures/parity.toml, the content cache is reused,
builds are deterministic, the trained models do their task and convert to ONNX with parity."""

from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

tf = pytest.importorskip("tensorflow")

from fixtures.zoo import build as zoo_build
from fixtures.zoo import data, models

FIXTURES = Path(zoo_build.ZOO).parent
CONFIG = {m["name"]: m for m in tomllib.loads((FIXTURES / "parity.toml").read_text())["models"]}
NAMES = list(models.MODEL_NAMES)
_LOADED = {}


def committed_inputs(name, batch=None):
    with np.load(FIXTURES / "inputs" / f"{name}.npz", allow_pickle=False) as npz:
        return {k: npz[k][:batch] for k in npz.files if not k.startswith("__")}


def serving(path):
    """The serving_default signature of the SavedModel at ``path`` (loaded once per path)."""
    if path not in _LOADED:
        _LOADED[path] = tf.saved_model.load(str(path))
    return _LOADED[path].signatures["serving_default"]


def run(signature, feeds):
    return {k: v.numpy() for k, v in signature(**{k: tf.constant(v) for k, v in feeds.items()}).items()}


@pytest.fixture(scope="module")
def built():
    return zoo_build.ensure_built()


@pytest.mark.tf
@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_config(built, name):
    config = CONFIG[name]
    reference = FIXTURES / config["reference"]
    assert reference.resolve() == (built[name] / "saved_model").resolve()
    signature = serving(built[name] / "saved_model")
    inputs = signature.structured_input_signature[1]
    assert sorted(inputs) == sorted(config["inputs"])
    for input_name, spec in config["inputs"].items():
        assert inputs[input_name].dtype == tf.as_dtype(spec["dtype"])
        assert inputs[input_name].shape.as_list() == [None, *spec["shape"][1:]]
    assert sorted(signature.structured_outputs) == sorted(models.SPECS[name].outputs)


@pytest.mark.tf
def test_second_ensure_built_reuses_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(zoo_build, "LINK_DIR", tmp_path / "links")
    first = zoo_build.ensure_built(["linear"])["linear"]
    assert first.parent == tmp_path / "cache" / "zoo"
    stamps = {p: p.stat().st_mtime_ns for p in [first, *first.rglob("*")]}

    def no_rebuild(*args):
        raise AssertionError("rebuilt although the cache was complete")

    monkeypatch.setattr(zoo_build, "build", no_rebuild)
    assert zoo_build.ensure_built(["linear"])["linear"] == first
    assert {p: p.stat().st_mtime_ns for p in [first, *first.rglob("*")]} == stamps
    assert (tmp_path / "links" / "linear").resolve() == first.resolve()


@pytest.mark.tf
def test_losing_a_build_race_keeps_the_winner(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE", str(tmp_path))
    monkeypatch.setattr(zoo_build, "LINK_DIR", tmp_path / "links")
    winner = zoo_build.ensure_built(["linear"])["linear"]
    stamp = (winner / zoo_build.COMPLETE).stat().st_mtime_ns
    zoo_build._build_cached("linear", winner)  # a slower process finishing the same build
    assert (winner / zoo_build.COMPLETE).stat().st_mtime_ns == stamp
    assert sorted(p.name for p in winner.parent.iterdir()) == [winner.name]  # temp dir cleaned up


@pytest.mark.tf
@pytest.mark.parametrize("name", NAMES)
def test_builds_are_bit_identical(tmp_path, name):
    feeds = committed_inputs(name)
    first = run(serving(zoo_build.build(name, tmp_path / "a") / "saved_model"), feeds)
    second = run(serving(zoo_build.build(name, tmp_path / "b") / "saved_model"), feeds)
    assert sorted(first) == sorted(second)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


@pytest.mark.tf
@pytest.mark.parametrize("name", NAMES)
def test_keras_file_matches_saved_model(built, name):
    feeds = committed_inputs(name)
    model = zoo_build.load_keras(built[name] / "model.keras")
    outputs = model.predict(feeds if len(feeds) > 1 else next(iter(feeds.values())), verbose=0)
    outputs = outputs if isinstance(outputs, dict) else {models.SPECS[name].outputs[0]: outputs}
    reference = run(serving(built[name] / "saved_model"), feeds)
    for key in reference:
        np.testing.assert_allclose(outputs[key], reference[key], rtol=1e-6, atol=1e-6, err_msg=key)


@pytest.mark.tf
def test_linear_is_five_x(built):
    x = committed_inputs("linear")["x"]
    np.testing.assert_allclose(run(serving(built["linear"] / "saved_model"), {"x": x})["y"], 5 * x, atol=1e-3)


@pytest.mark.tf
def test_mobilenet_heldout_accuracy(built):
    with np.load(FIXTURES / "inputs" / "mobilenet_heldout.npz", allow_pickle=False) as npz:
        images, labels = npz["image"], npz["__labels__"]
    probs = run(serving(built["mobilenet"] / "saved_model"), {"image": images})["probs"]
    assert np.mean(np.argmax(probs, -1) == labels) >= 0.9


@pytest.mark.tf
def test_bert_accuracy_on_fresh_data(built):
    feeds, labels = data.sentiment_batch(1000, seed=12345)
    probs = run(serving(built["bert"] / "saved_model"), feeds)["probs"]
    assert np.mean(np.argmax(probs, -1) == labels) >= 0.9


@pytest.mark.tf
def test_bert_ignores_padding(built):
    feeds, _ = data.sentiment_batch(64, seed=54321)
    noisy = dict(feeds)
    rng = np.random.default_rng(0)
    pad = feeds["attention_mask"] == 0
    noisy["input_ids"] = np.where(pad, rng.integers(0, data.VOCAB, pad.shape), feeds["input_ids"]).astype(np.int32)
    noisy["token_type_ids"] = np.where(pad, rng.integers(0, 2, pad.shape), feeds["token_type_ids"]).astype(np.int32)
    signature = serving(built["bert"] / "saved_model")
    np.testing.assert_allclose(run(signature, noisy)["probs"], run(signature, feeds)["probs"], atol=1e-6)


@pytest.mark.tf
def test_ssd_detects_shapes(built):
    images, boxes, classes = data.shape_scenes(200, seed=12345)
    outputs = run(serving(built["ssd"] / "saved_model"), {"image": images})
    metrics = data.detection_metrics(outputs, boxes, classes)
    assert metrics["precision"] >= 0.9 and metrics["recall"] >= 0.9 and metrics["mean_iou"] >= 0.8, metrics
    golden = data.shape_scenes(len(committed_inputs("ssd")["image"]), seed=data.HELDOUT_SEED)
    np.testing.assert_array_equal(golden[0], committed_inputs("ssd")["image"])
    golden_outputs = run(serving(built["ssd"] / "saved_model"), {"image": golden[0]})
    assert data.detection_metrics(golden_outputs, golden[1], golden[2])["recall"] == 1.0


@pytest.mark.tf
def test_image_models_see_nothing_in_contentless_images(built):
    """Noise / constant images (what property-based parity feeds) give no detections and no confident class,
    so reduced precision cannot flip a detection threshold or a near-tie there."""
    ssd = run(serving(built["ssd"] / "saved_model"), {"image": data.pattern_images(64, (32, 32, 3), seed=777)})
    assert ssd["num_detections"].sum() == 0 and not ssd["scores"].any() and not ssd["boxes"].any()
    probs = run(serving(built["mobilenet"] / "saved_model"), {"image": data.pattern_images(64, (16, 16, 3), seed=777)})
    assert probs["probs"].max() < 0.5


@pytest.fixture(scope="module")
def onnx_models(built):
    """name -> the SavedModel converted with tf2onnx (opset 17), an onnx ModelProto."""
    tf2onnx = pytest.importorskip("tf2onnx")
    protos = {}
    for name in NAMES:
        restored = tf.saved_model.load(str(built[name] / "saved_model"))
        specs = [tf.TensorSpec([None, *s.shape[1:]], s.dtype, name=s.name) for s in models.SPECS[name].inputs]
        protos[name], _ = tf2onnx.convert.from_function(restored.serve, input_signature=specs, opset=17)
    return protos


def run_onnx(proto, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == sorted(feeds)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", NAMES)
def test_onnx_matches_tensorflow(built, onnx_models, name, batch):
    feeds = committed_inputs(name, batch)
    got = run_onnx(onnx_models[name], feeds)
    want = run(serving(built[name] / "saved_model"), feeds)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].shape == want[key].shape == (batch, *want[key].shape[1:])
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=key)


# The ops paritygate's FP16 ONNX keeps in FP32 (plugins/paritygate/backend/onnx/artifacts/loader.py, FP16_KEEP_FP32).
FP16_KEEP_FP32 = ["LayerNormalization", "Softmax", "Exp", "Pow", "Sqrt", "ReduceMean", "ReduceSum", "Erf"]


@pytest.mark.tf
@pytest.mark.onnx
@pytest.mark.parametrize("name", NAMES)
def test_onnx_survives_fp16_conversion(built, onnx_models, name):
    """onnxconverter-common's FP16 conversion breaks graphs with a Cast to float; the zoo avoids them."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    import onnx

    proto = onnx_models[name]
    casts = [n.name for n in proto.graph.node if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT]
    assert not casts
    half = float16.convert_float_to_float16(onnx.ModelProto.FromString(proto.SerializeToString()), keep_io_types=True,
                                            op_block_list=FP16_KEEP_FP32 + list(float16.DEFAULT_OP_BLOCK_LIST))
    feeds = committed_inputs(name)
    got = run_onnx(half, feeds)
    want = run(serving(built[name] / "saved_model"), feeds)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-2, atol=1e-2, err_msg=key)
