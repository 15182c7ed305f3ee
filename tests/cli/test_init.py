"""paritygate.cli.init (``paritygate init``): the config it writes loads, marks what the model cannot tell,
pairs decorated ONNX names explicitly, and runs unedited on a bundled model and on basic-pitch."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paritygate.cli.init import CONFIRM, InitError, Inspected, render, write_starter
from paritygate.models.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_render_marks_what_the_model_cannot_tell_and_loads(tmp_path):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    found = Inspected(tmp_path / "sm", "serving_default",
                      {"tokens": (np.dtype("int32"), (-1, -1)), "image": (np.dtype("uint8"), (-1, 8, 8, 3))},
                      ["logits"], onnx=tmp_path / "m.onnx",
                      input_map={"tokens": ("serving_default_tokens:0", "decorated"), "image": ("in_1", "position")},
                      output_map={"logits": ("StatefulPartitionedCall:0", "signature")})
    (tmp_path / "m.onnx").write_bytes(b"")
    text = render(found, "m", tmp_path, max_batch=2)
    (tmp_path / "parity.toml").write_text(text)
    (spec,) = load_config(tmp_path / "parity.toml", check_files=False)
    assert spec.inputs["tokens"].shape == (-1, -1) and spec.inputs["tokens"].range == (0, 1)
    assert spec.inputs["tokens"].profile == ((1, 16), (2, 32), (2, 64))
    assert spec.inputs["image"].range == (0, 255) and spec.inputs["image"].candidate == "in_1"
    assert spec.outputs == {"logits": "StatefulPartitionedCall:0"} and spec.max_batch == 2
    confirm = [line for line in text.splitlines() if CONFIRM in line and not line.startswith("#")]
    assert any(line.startswith("profile = ") and "dimension(s) 1 dynamic" in line for line in confirm)
    assert any(line.startswith("candidate = \"in_1\"") and "position" in line for line in confirm)
    assert sum(line.startswith("range = ") for line in confirm) == 2


def test_an_onnx_model_is_not_a_reference(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    with pytest.raises(InitError, match="pass the TensorFlow model .* and this file with --onnx"):
        write_starter(tmp_path / "m.onnx", tmp_path / "parity.toml")
    with pytest.raises(InitError, match="no such file"):
        write_starter(tmp_path / "missing", tmp_path / "parity.toml")
    (tmp_path / "parity.toml").write_text("")
    with pytest.raises(InitError, match="already exists; pass --force"):
        write_starter(tmp_path / "missing", tmp_path / "parity.toml")


def _suite(config, cwd, *selection):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "conformance"), f"--parity-config={config}",
                           "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rfE", "-k", " or ".join(selection)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.onnx
def test_init_config_runs_unedited_on_a_bundled_model(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnxruntime")
    from paritygate.models.bundled import zoo_module

    build = zoo_module("build")
    build.ensure_built(["mobilenet"])
    config = write_starter(build.LINK_DIR / "mobilenet" / "saved_model", tmp_path / "parity.toml")
    (spec,) = load_config(config)
    assert spec.name == "mobilenet" and list(spec.inputs) == ["image"] and spec.inputs["image"].shape == (-1, 16, 16, 3)
    rc, out = _suite(config, tmp_path, "matches_reference", "accepts_every_batch_size", "determinism",
                     "property_parity")
    assert rc == 0 and "4 passed" in out, out[-5000:]


@pytest.mark.slow
@pytest.mark.tf
@pytest.mark.onnx
def test_init_pairs_basic_pitch_decorated_names_and_the_config_runs(tmp_path):
    basic_pitch = pytest.importorskip("basic_pitch")
    pytest.importorskip("onnxruntime")
    models = Path(basic_pitch.__file__).parent / "saved_models" / "icassp_2022"
    shutil.copytree(models / "nmp", tmp_path / "nmp")
    shutil.copy(models / "nmp.onnx", tmp_path / "nmp.onnx")
    config = write_starter(tmp_path / "nmp", tmp_path / "parity.toml", onnx=tmp_path / "nmp.onnx")
    (spec,) = load_config(config)
    assert spec.inputs["input_2"].candidate == "serving_default_input_2:0"
    assert spec.inputs["input_2"].shape == (-1, 43844, 1) and spec.inputs["input_2"].range == (-1.0, 1.0)
    assert spec.outputs == {"contour": "StatefulPartitionedCall:0", "note": "StatefulPartitionedCall:1",
                            "onset": "StatefulPartitionedCall:2"}
    # property_parity and batch_invariance FAIL on this model: on all-zero audio nmp.onnx differs from the
    # SavedModel (max abs 0.034 on 'onset') and a batch's element 0 differs from the same element alone.
    rc, out = _suite(config, tmp_path, "matches_reference", "accepts_every_batch_size", "determinism")
    assert rc == 0 and "3 passed" in out, out[-5000:]


def test_render_writes_the_teams_own_fp16_and_int8_files(tmp_path):
    """`paritygate init --onnx-fp16 F --onnx-int8 G`: onnx becomes a table per precision, precisions list them,
    and int8 needs no calibration (the file is already quantized)."""
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    for f in ("m.onnx", "m.fp16.onnx", "m.int8.onnx"):
        (tmp_path / f).write_bytes(b"")
    found = Inspected(tmp_path / "sm", "serving_default", {"x": (np.dtype("float32"), (-1, 4))}, ["y"],
                      onnx=tmp_path / "m.onnx", artifacts={"fp16": tmp_path / "m.fp16.onnx",
                                                           "int8": tmp_path / "m.int8.onnx"})
    text = render(found, "m", tmp_path)
    assert 'onnx = { fp32 = "m.onnx", fp16 = "m.fp16.onnx", int8 = "m.int8.onnx" }' in text
    (tmp_path / "parity.toml").write_text(text)
    (spec,) = load_config(tmp_path / "parity.toml", check_files=False)
    assert spec.precisions == ("fp32", "fp16", "int8") and spec.calibration is None
    assert spec.onnx == tmp_path / "m.onnx"
    assert spec.onnx_artifacts == {"fp16": tmp_path / "m.fp16.onnx", "int8": tmp_path / "m.int8.onnx"}


# -- what the graph tells about an input's values (paritygate.cli.hints) -------------------------------------
def _range_line(path, name):
    lines = Path(path).read_text().splitlines()
    return next(line for line in lines[lines.index(f"[models.inputs.{name}]"):] if line.startswith("range = "))


@pytest.mark.tf
def test_token_ids_feeding_an_embedding_get_its_rows(tmp_path, embedding_model):
    """SentiToolKit's case: float32 token ids into a 5,000-row Embedding got [-1, 1] (rows 0 and 1 only). The
    .keras file's layer tells, and so does the ONNX's Gather when init reads a SavedModel with --onnx."""
    from tests.conftest import embedding_classifier

    embedding_classifier().save(tmp_path / "senti.keras")
    write_starter(tmp_path / "senti.keras", tmp_path / "keras.toml")
    line = _range_line(tmp_path / "keras.toml", "ids")
    assert line.startswith("range = [0.0, 4999.0]  # from the model: feeds Embedding 'embedding' of 5000 rows"), line
    saved, onnx_path = embedding_model
    write_starter(saved, tmp_path / "saved.toml", onnx=onnx_path)
    line = _range_line(tmp_path / "saved.toml", "ids")
    assert line.startswith("range = [0.0, 4999.0]  # from the model: indexes 5000 rows of a table (Gather"), line
    assert CONFIRM not in line


@pytest.mark.tf
def test_a_rescaling_layer_gives_raw_pixels_and_a_vgg_backbone_caffe_pixels(tmp_path):
    keras = pytest.importorskip("keras")
    image = keras.Input((None, None, 3), name="image")
    scaled = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(image)
    keras.Model(image, keras.layers.Conv2D(2, 3, name="conv")(scaled)).save(tmp_path / "rescaled.keras")
    write_starter(tmp_path / "rescaled.keras", tmp_path / "rescaled.toml")
    line = _range_line(tmp_path / "rescaled.toml", "image")
    assert line.startswith("range = [0.0, 255.0]  # from the model: Rescaling") and "onto [-1, 1]" in line, line

    bgr = keras.Input((None, None, 3), name="image")  # HED's case: a VGG16 backbone fed BGR minus the Caffe mean
    keras.Model(bgr, keras.layers.Conv2D(2, 3, name="block1_conv1")(bgr)).save(tmp_path / "vgg.keras")
    write_starter(tmp_path / "vgg.keras", tmp_path / "vgg.toml")
    line = _range_line(tmp_path / "vgg.toml", "image")
    assert line.startswith(f"range = [-123.68, 151.061]  {CONFIRM} from the model: a Keras Applications VGG"), line
    text = (tmp_path / "vgg.toml").read_text()
    assert "profile = { min = [1, 32, 32, 3], opt = [4, 224, 224, 3], max = [4, 320, 320, 3] }" in text


@pytest.mark.tf
def test_where_nothing_tells_the_comment_says_what_to_look_for_and_the_header_names_the_file(tmp_path):
    keras = pytest.importorskip("keras")
    x = keras.Input((4,), name="x")
    keras.Model(x, keras.layers.Dense(1, name="out")(x)).save(tmp_path / "plain.keras")
    write_starter(tmp_path / "plain.keras", tmp_path / "other.toml")
    line = _range_line(tmp_path / "other.toml", "x")
    assert line.startswith(f"range = [-1.0, 1.0]  {CONFIRM}: the inclusive bounds") and "x/255 -> [0.0, 1.0]" in line
    assert "Caffe/VGG (BGR minus the ImageNet mean) -> [-123.68, 151.061]" in line and "[0, N-1]" in line
    text = (tmp_path / "other.toml").read_text()
    assert "paritygate run other.toml" in text and "--parity-config=other.toml" in text
    assert "parity.toml" not in text


# -- issue 38: no name a model or a file gives becomes config ----------------------------------------------------
EVIL_KEY = 'y\n[models.beam]\nhandler = "evil_sm.pwn:make"\n#'
NAMES = st.text(st.sampled_from('"\'\\\n\r\t\x00\x1b\x7f\u2028\u202e[]{}=#.,: ') | st.characters(
    exclude_categories=("Cs",)), min_size=1, max_size=24)
FOLDERS = NAMES.filter(lambda n: "/" not in n and "\x00" not in n and n not in (".", "..") and len(n.encode()) < 200)


def _parsed(text):
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return tomllib.loads(text)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=st.lists(NAMES, min_size=1, max_size=3, unique=True), outputs=st.lists(NAMES, min_size=1, max_size=3),
       candidates=st.lists(NAMES, min_size=3, max_size=3), folder=FOLDERS, file=FOLDERS, paired=st.booleans())
def test_whatever_the_models_names_the_config_parses_to_exactly_the_intended_keys(tmp_path, inputs, outputs,
                                                                                   candidates, folder, file, paired):
    reference = tmp_path / folder / "saved_model"
    reference.mkdir(parents=True, exist_ok=True)
    found = Inspected(reference, candidates[0], {n: (np.dtype("float32"), (-1, 3)) for n in inputs}, outputs,
                      onnx=tmp_path / folder / f"{file}.onnx" if paired else None,
                      input_map={n: (candidates[2], "position") for n in inputs} if paired else {},
                      output_map={o: (candidates[2], "position") for o in outputs} if paired else {})
    hints = {n: (0, 1, f"Gather '{candidates[1]}' of '{n}'") for n in inputs}
    doc = _parsed(render(found, "m", tmp_path, hints=hints))
    assert list(doc) == ["models"] and len(doc["models"]) == 1
    (model,) = doc["models"]
    assert set(model) == {"name", "reference", "signature", "precisions", "max_batch", "task", "inputs",
                          *(("onnx", "outputs") if paired else ())}
    assert model["reference"] == f"{folder}/saved_model" and model["signature"] == candidates[0]
    assert list(model["inputs"]) == inputs
    for name in inputs:
        assert set(model["inputs"][name]) == {"shape", "dtype", "range", *(("candidate",) if paired else ())}
    if paired:
        assert model["onnx"] == f"{folder}/{file}.onnx"
        assert model["outputs"] == {o: candidates[2] for o in outputs}


@pytest.mark.tf
def test_an_output_key_that_writes_a_handler_line_stays_a_name_and_nothing_runs(tmp_path):
    """The issue's attack: a SavedModel whose output key ends the comment and writes [models.beam], shipping the
    module it names. The config ``init`` writes names no handler, and a run of its validation imports nothing."""
    tf = pytest.importorskip("tensorflow")

    class Evil(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {EVIL_KEY: x * 2.0}

    module, folder = Evil(), tmp_path / "evil_sm"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    (folder / "__init__.py").write_text("")
    (folder / "pwn.py").write_text("from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('x')\n"
                                   "def make(**kw):\n    raise SystemExit\n")
    config = write_starter(folder, tmp_path / "parity.toml")
    text = config.read_text()
    assert "\n[models.beam]" not in text and 'handler = "evil_sm' not in text, text
    (spec,) = load_config(config)
    assert spec.beam is None and "tolerances" not in text
    assert _parsed(text)["models"][0].keys() == {"name", "reference", "signature", "precisions", "max_batch", "task",
                                                 "inputs"}
    from paritygate.judge.declared import handler
    from paritygate.judge.preflight import ModelValidation

    handler(spec, ModelValidation(spec))
    assert not (folder / "PWNED").exists()
