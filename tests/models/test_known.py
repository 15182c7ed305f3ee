"""paritygate.models.known: [[known_failures]] beside the config become strict xfails of exactly the named checks."""

import json
from pathlib import Path

import pytest

from paritygate.lazy import available
from paritygate.models.config import ConfigError
from paritygate.models.known import load_known_failures
from tests.conftest import make_onnx, scale, write_config

pytest.importorskip("onnx")  # before any test: pytester restores sys.modules, and re-importing onnx after TF aborts
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.onnx]

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance" / "test_parity.py"
KNOWN = """
[[known_failures]]
model = "toy"
check = "matches_reference"
precision = "fp32"
reason = "drifted weight, tracked in TICKET-1"
"""


def _reshape_to(n, out):
    """out = Reshape(x, [n, 1]): ONNX Runtime raises on every batch of another size."""
    import onnx

    shape = onnx.helper.make_tensor(f"{out}_shape", onnx.TensorProto.INT64, [2], [n, 1])
    return [onnx.helper.make_node("Constant", [], [f"{out}_shape"], value=shape),
            onnx.helper.make_node("Reshape", ["x", f"{out}_shape"], [out])]


def _run(pytester, toy_saved_model, y_scale):
    onnx_path = pytester.path / "cand.onnx"
    if y_scale is None:  # the check crashes: a candidate that loads (and passes validation) but cannot run a batch
        make_onnx(onnx_path, _reshape_to(7, "y"), scale("z", 2.0))
    else:
        make_onnx(onnx_path, scale("y", y_scale), scale("z", 2.0))
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": onnx_path.name, "precisions": ["fp32"],
        "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    (pytester.path / "expectations.toml").write_text(KNOWN)
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={cfg}", f"--parity-report={report}",
                                           "-p", "no:cacheprovider", "-p", "no:xdist")
    checks = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    return result, checks


RTX = int(available("tensorrt_rtx"))  # engine_builds passes with TensorRT-RTX's builder, skips without it


def test_a_known_failure_is_an_xfail_with_its_reason(pytester, toy_saved_model):
    result, checks = _run(pytester, toy_saved_model, 5.01)
    # accepts_every_batch_size passes, engine_builds too (skips without TensorRT-RTX's builder); no task metric
    result.assert_outcomes(passed=1 + RTX, xfailed=1, skipped=2 - RTX)
    assert checks["matches_reference"]["status"] == "xfail"
    assert "TICKET-1" in checks["matches_reference"]["details"]["reason"]


def test_a_known_failure_that_passes_fails_the_run(pytester, toy_saved_model):
    result, checks = _run(pytester, toy_saved_model, 5.0)
    result.assert_outcomes(passed=1 + RTX, failed=1, skipped=2 - RTX)
    assert checks["matches_reference"]["status"] == "fail"


def test_a_crash_of_a_known_failures_check_is_not_the_known_failure(pytester, toy_saved_model):
    """raises=AssertionError: only the candidate being wrong is the recorded failure; an exception is itself."""
    result, checks = _run(pytester, toy_saved_model, None)
    assert result.ret == 1
    assert result.parseoutcomes().get("xfailed") is None
    if RTX:  # TensorRT's builder refuses it first (its Reshape to 7 rows against the profile's batches): one fail
        assert checks["engine_builds"]["status"] == "fail" and "cand.onnx" in checks["engine_builds"]["details"]["message"]
        assert checks["matches_reference"]["status"] == "skip", checks["matches_reference"]
        return
    assert checks["matches_reference"]["status"] in ("fail", "error"), checks["matches_reference"]
    assert "reason" not in checks["matches_reference"]["details"]  # no known-failure reason: not an xfail
    assert "cand.onnx" in checks["matches_reference"]["details"]["message"]
    assert result.parseoutcomes().get("xfailed") is None


def test_malformed_entries_name_the_file_and_key(tmp_path):
    (tmp_path / "expectations.toml").write_text('[[known_failures]]\nmodel = "m"\nchek = "x"\nreason = "r"\n')
    with pytest.raises(ConfigError, match=r"expectations.toml: known_failures\[0\]: unknown key\(s\) \['chek'\], "
                                          r"missing key\(s\) \['check'\]"):
        load_known_failures(tmp_path / "parity.toml")


def test_a_known_failure_can_name_the_numerics_it_happens_under():
    """`numerics = "strict"`: the entry marks the check under strict numerics only, not under ONNX Runtime's own."""
    from paritygate.models.known import mark_known_failures

    class Item:
        originalname, markers = "test_property_parity", []

        def add_marker(self, marker):
            self.markers.append(marker)

    entry = {"model": "bert", "check": "property_parity", "precision": "fp16", "numerics": "strict", "reason": "r",
             "source": "expectations.toml known_failures[0]"}
    for numerics, marked in (("ort", 0), ("strict", 1)):
        item = Item()
        item.markers = []
        mark_known_failures(item, "bert", "fp16", "onnxruntime", [entry], numerics)
        assert len(item.markers) == marked


# -- a known failure anchored to its input ------------------------------------------------------------------
SPOT = 0.123456  # the one input the candidate gets wrong: no draw of Hypothesis lands on it


def _wrong_at_spot():
    """y = 5x, but 5x + 1 where x == SPOT; z = 2x."""
    import onnx

    h = onnx.helper
    spot = h.make_tensor("spot", onnx.TensorProto.FLOAT, [], [SPOT])
    return [h.make_node("Constant", [], ["spot"], value=spot), h.make_node("Equal", ["x", "spot"], ["hit"]),
            h.make_node("Cast", ["hit"], ["bump"], to=onnx.TensorProto.FLOAT), *scale("y5", 5.0),
            h.make_node("Add", ["y5", "bump"], ["y"]), *scale("z", 2.0)]


def _anchored_run(pytester, toy_saved_model, reproducer):
    import numpy as np

    make_onnx(pytester.path / "cand.onnx", _wrong_at_spot())
    cfg = write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": "cand.onnx", "precisions": ["fp32"],
        "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    meta = json.dumps({"config": str(cfg), "model": "toy", "precision": "fp32", "check": "property_parity",
                       "runtime": "onnxruntime"})
    np.savez(pytester.path / "spot.npz", **{"input:x": np.array([[0.5], [SPOT]], np.float32),
                                            "__meta__": np.array(meta)})
    entry = '[[known_failures]]\nmodel = "toy"\ncheck = "property_parity"\nreason = "wrong at one input, TICKET-2"\n'
    (pytester.path / "expectations.toml").write_text(entry + (f'reproducer = "{reproducer}"\n' if reproducer else ""))
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE.parent / "test_properties.py"), f"--parity-config={cfg}",
                                           f"--parity-report={report}", "-k", "property_parity", "-p", "no:cacheprovider",
                                           "-p", "no:xdist")
    return result, report


def test_a_known_failure_with_its_reproducer_is_tried_on_that_input_every_run(pytester, toy_saved_model):
    result, report = _anchored_run(pytester, toy_saved_model, "spot.npz")
    result.assert_outcomes(xfailed=1)
    (check,) = json.loads((report / "parity-report.json").read_text())["checks"]
    assert check["status"] == "xfail" and "TICKET-2" in check["details"]["reason"]
    # without it, no draw finds the input: the strict xfail passes and fails the run
    result, _ = _anchored_run(pytester, toy_saved_model, None)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*TICKET-2*"])


def test_a_reproducer_of_another_check_or_not_a_reproducer_is_refused(tmp_path):
    import numpy as np

    meta = json.dumps({"config": "c", "model": "toy", "precision": "fp32", "check": "batch_invariance",
                       "runtime": "onnxruntime"})
    np.savez(tmp_path / "other.npz", **{"input:x": np.zeros((1, 1), np.float32), "__meta__": np.array(meta)})
    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    for file, message in (("other.npz", (r"reproduces model 'toy' check 'batch_invariance', expected model 'toy' "
                                        r"check 'property_parity'")),
                          ("junk.npz", r"junk.npz: not a paritygate reproducer")):
        (tmp_path / "expectations.toml").write_text('[[known_failures]]\nmodel = "toy"\ncheck = "property_parity"\n'
                                                    f'reason = "r"\nreproducer = "{file}"\n')
        with pytest.raises(ConfigError, match=r"expectations.toml: known_failures\[0\]: key 'reproducer': .*" + message):
            load_known_failures(tmp_path / "parity.toml")


def test_a_reproducer_whose_arrays_do_not_fit_the_model_names_its_file(tmp_path):
    import numpy as np

    from paritygate.inputs.sets import InputSetError
    from paritygate.models.known import known_failure_feeds
    from tests.conftest import toy_spec

    meta = json.dumps({"config": "c", "model": "toy", "precision": "fp32", "check": "property_parity",
                       "runtime": "onnxruntime"})
    np.savez(tmp_path / "r.npz", **{"input:x": np.zeros((1, 3), np.float32), "__meta__": np.array(meta)})
    (tmp_path / "expectations.toml").write_text('[[known_failures]]\nmodel = "toy"\ncheck = "property_parity"\n'
                                                'reason = "r"\nreproducer = "r.npz"\n')
    spec = toy_spec(source=tmp_path / "parity.toml")
    with pytest.raises(InputSetError, match=r"r.npz: array 'x' is float32\[1, 3\], expected float32 \['N', 1\]"):
        known_failure_feeds(spec)
    assert known_failure_feeds(spec, "fp32", "batch_invariance") == []  # another check: not read
