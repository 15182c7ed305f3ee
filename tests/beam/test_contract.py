"""The handler contract: loading ``module:callable``, the handler's precision, normalising results."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("apache_beam")

from paritygate.beam import contract
from paritygate.beam.contract import HandlerContractError
from tests.conftest import toy_spec

pytestmark = [pytest.mark.beam]


def test_importing_the_package_imports_no_beam():
    code = ("import sys, paritygate.beam, paritygate.beam.contract, paritygate.beam.expectations, "
            "paritygate.beam.checks, paritygate.beam.direct; "
            "print(sorted(m for m in ('apache_beam', 'tensorflow', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_load_factory_names_the_config_key(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "my_handlers.py").write_text("def good(min_batch_size, max_batch_size):\n    return 1\nbad = 3\n")
    assert contract.load_factory(toy_spec(beam={"handler": "my_handlers:good"})).__name__ == "good"
    with pytest.raises(HandlerContractError, match=r"key 'beam.handler': 'my_handlers' has no callable 'bad'"):
        contract.load_factory(toy_spec(beam={"handler": "my_handlers:bad"}))
    with pytest.raises(HandlerContractError, match="cannot import module 'nowhere_handlers'"):
        contract.load_factory(toy_spec(beam={"handler": "nowhere_handlers:x"}))


def test_make_handler_wants_an_unkeyed_model_handler():
    from apache_beam.ml.inference.base import KeyedModelHandler

    from tests.beam.toy_handlers import ToyHandler

    spec = toy_spec(beam={"handler": "m:f"})
    with pytest.raises(HandlerContractError, match="returned int, not an apache_beam ModelHandler"):
        contract.make_handler(spec, lambda **kw: 3, 1, 4)
    with pytest.raises(HandlerContractError, match="return the unkeyed handler"):
        contract.make_handler(spec, lambda **kw: KeyedModelHandler(ToyHandler("x.onnx")), 1, 4)


def test_a_factory_that_takes_the_model_is_given_its_spec_and_the_candidate_onnx_path(tmp_path):
    """What docs/beam.md tells a team: its factory gets batch sizes only, unless it sets paritygate_takes_model =
    True; then also model=<ModelSpec> (its onnx, its own fp16/int8 files) and the reference's output names."""
    from tests.beam.toy_handlers import ToyHandler

    seen = {}

    def factory(min_batch_size, max_batch_size, model, reference_outputs=None):
        seen.update(model=model, outputs=reference_outputs)
        return ToyHandler(model.onnx, min_batch_size, max_batch_size)

    factory.paritygate_takes_model = True
    spec = toy_spec(onnx=tmp_path / "candidate.onnx", onnx_artifacts={"fp16": tmp_path / "own.fp16.onnx"})
    handler = contract.make_handler(spec, factory, 1, 4, reference_outputs=["y", "z"])
    assert handler.onnx_path == str(tmp_path / "candidate.onnx") and seen["outputs"] == ["y", "z"]
    assert seen["model"].onnx_artifacts["fp16"] == tmp_path / "own.fp16.onnx"
    with pytest.raises(HandlerContractError, match="missing 1 required positional argument: 'model'"):
        contract.make_handler(spec, lambda min_batch_size, max_batch_size, model: None, 1, 4)  # without the flag


def test_precision_is_fp32_unless_declared():
    class H:
        pass

    spec = toy_spec(precisions=("fp32", "fp16"), beam={"handler": "m:f"})
    assert contract.declared_precision(spec, H(), lambda: None) == "fp32"
    h = H()
    h.paritygate_precision = "fp16"
    assert contract.declared_precision(spec, h, lambda: None) == "fp16"

    def factory():
        pass

    factory.paritygate_precision = "int8"
    with pytest.raises(HandlerContractError, match="which the model's precisions"):
        contract.declared_precision(spec, H(), factory)
    h.paritygate_precision = "bf16"
    with pytest.raises(HandlerContractError, match="expected one of"):
        contract.declared_precision(spec, h, factory)


def test_normalise_inference_accepts_array_dict_and_sequence():
    spec = toy_spec(outputs={"y": "y_out"})
    y, z = np.float32([5.0]), np.float32([2.0])
    assert contract.normalise_inference(spec, ["y"], y) == {"y_out": y}
    assert contract.normalise_inference(spec, ["y", "z"], {"y_out": y, "z": z}) == {"y_out": y, "z": z}
    assert contract.normalise_inference(spec, ["y", "z"], (y, z)) == {"y_out": y, "z": z}
    assert contract.normalise_inference(spec, ["y", "z"], [y, z])["z"] is not z  # a copy
    with pytest.raises(HandlerContractError, match="list of 1 item"):
        contract.normalise_inference(spec, ["y", "z"], [y])
    with pytest.raises(HandlerContractError, match="inference is a str"):
        contract.normalise_inference(spec, ["y"], "nope")


@pytest.mark.tf
def test_normalise_inference_reads_tensorflow_tensors():
    tf = pytest.importorskip("tensorflow")
    out = contract.normalise_inference(toy_spec(), ["y"], tf.constant([1.0, 2.0]))
    assert isinstance(out["y"], np.ndarray) and out["y"].tolist() == [1.0, 2.0]


def test_digest_and_payload_of_elements():
    a = np.arange(4, dtype=np.float32)
    assert contract.digest(a) == contract.digest(a.copy()) != contract.digest(a.astype(np.float64))
    assert contract.digest({"a": a, "b": a}) != contract.digest({"a": a, "c": a})
    assert contract.payload_bytes(a) == 16 and contract.payload_bytes({"a": a, "b": a[:1]}) == 20


def test_references_are_batched_and_memoised():
    calls = []

    def reference(feed):
        calls.append(len(feed["x"]))
        return {"y": feed["x"] * 5}

    spec = toy_spec(max_batch=2)
    subject = contract.HandlerUnderTest(spec, None, reference, ["y"])
    elements = [np.float32([i]) for i in range(3)]
    refs = subject.references(elements + elements[:1])
    assert [r["y"].tolist() for r in refs] == [[0.0], [5.0], [10.0], [0.0]]
    assert calls == [2, 1]
    subject.references(elements)
    assert calls == [2, 1]


def test_reference_batches_depend_only_on_the_examples_given():
    """``references`` runs the distinct examples max_batch at a time in the order given, whatever an earlier call
    computed: the batches a pipeline check sends the reference are the same on a rerun and in any worker (Beam's
    output order and batch split vary; callers pass a run's inputs in input order)."""
    spec = toy_spec(max_batch=4)
    examples = [np.array([float(i)], np.float32) for i in range(10)]

    def batches(calls):
        seen = []

        def reference(batch):
            seen.append(tuple(float(v) for v in batch["x"].ravel()))
            return {"y": batch["x"] * 5}

        subject = contract.HandlerUnderTest(spec, None, reference, ["y"])
        out = [subject.references(call) for call in calls]
        return seen, out[-1]

    alone, refs = batches([examples])
    assert alone == [(0.0, 1.0, 2.0, 3.0), (4.0, 5.0, 6.0, 7.0), (8.0, 9.0)]
    assert [float(r["y"][0]) for r in refs] == [5.0 * i for i in range(10)]
    after_a_short_batch, _ = batches([[examples[9], examples[2]], examples + examples[:3]])
    assert after_a_short_batch[1:] == alone, "a batch holding one uncomputed example runs whole"


SHADOWS = ("onnx", "tensorrt", "polygraphy")  # modules the suite imports, or probes for, after the config loads


def test_a_config_folder_runs_no_code_but_the_handler_it_names(tmp_path):
    """Issue 33 (security): loading a config put its folder first on sys.path, so an ``onnx.py`` beside it ran when
    the suite imported onnx, with no [models.beam] at all. Now only the handler module the config names is
    imported from there, and a file named like an installed module never shadows it afterwards."""
    (tmp_path / "ref").mkdir()
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / ('RAN-' + name))!r}, 'w').close()\n")
    (tmp_path / "team_handlers.py").write_text("def make(min_batch_size, max_batch_size):\n    return 1\n")
    code = f"""
import sys
from paritygate.models.config import load_config
from paritygate.lazy import available
from paritygate.beam.contract import load_factory
without, with_handler = [load_config(p)[0] for p in sys.argv[1:]]
assert {str(tmp_path)!r} not in sys.path
import onnx
print(available("tensorrt"), available("polygraphy"))
assert load_factory(with_handler)(1, 2) == 1
assert sys.path[-1] == {str(tmp_path)!r}  # last: the handler's later imports and Beam's workers find its folder
import onnx.helper
print(available("tensorrt"), available("polygraphy"))
"""
    base = {"reference": "ref", "precisions": ["fp32"], "max_batch": 2,
            "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    from tests.conftest import write_config

    plain = write_config(tmp_path, {"models": [dict(base, name="m")]}, "plain.toml")
    named = write_config(tmp_path, {"models": [dict(base, name="h", beam={"handler": "team_handlers:make"})]},
                         "handler.toml")
    out = subprocess.run([sys.executable, "-c", code, str(plain), str(named)], capture_output=True, text=True,
                         check=False, cwd="/")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.glob("RAN-*")) == [], out.stdout
