"""End to end (pytester): conformance/test_runinference.py over a temporary config whose handler module sits
beside it, with a correct handler, a handler that drops an element, and a model without a beam table."""

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")
pytest.importorskip("onnx")  # before pytester snapshots sys.modules: re-importing onnx's extension aborts

from tests.conftest import make_onnx, write_config

pytestmark = [pytest.mark.beam, pytest.mark.tf, pytest.mark.onnx, pytest.mark.slow]

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance" / "test_runinference.py"
# Its runs are in-process: tests/conftest.py preloads the Beam modules a pipeline imports on first use
# (BEAM_ON_FIRST_USE). Dropped by pytester's restore of sys.modules and imported again by this worker's later Beam
# tests, they left two copies of one class ("'_Future' object has no attribute 'error'" in tests/beam/test_checks.py,
# measured before the preload).

HANDLERS = textwrap.dedent('''
    import numpy as np
    from apache_beam.ml.inference.base import ModelHandler, PredictionResult

    ONNX = __file__.replace("handlers.py", "toy.onnx")

    class Toy(ModelHandler):  # as a team writes one: its own __init__ (no model_copies), no update_model_path
        def __init__(self, min_batch_size=None, max_batch_size=None):
            super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size)

        def load_model(self):
            import onnxruntime as ort
            return ort.InferenceSession(ONNX, providers=["CPUExecutionProvider"])

        def run_inference(self, batch, model, inference_args=None):
            y, z = model.run(["y", "z"], {"x": np.stack(batch)})
            return [PredictionResult(x, {"y": y[i], "z": z[i]}) for i, x in enumerate(batch)]

        def get_num_bytes(self, batch):
            return sum(x.nbytes for x in batch)

    class Drops(Toy):
        def run_inference(self, batch, model, inference_args=None):
            return super().run_inference(batch, model, inference_args)[:-1]

    def correct(**kw):  # issue 30's factory: takes model_copies through **kw, which Toy cannot take
        return Toy(**kw)

    def drops(min_batch_size, max_batch_size):
        return Drops(min_batch_size=min_batch_size, max_batch_size=max_batch_size)
''')


def _model(name, reference, beam=None):
    table = {"name": name, "reference": str(reference), "precisions": ["fp32"], "max_batch": 4,
             "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}
    return {**table, "beam": beam} if beam else table


def test_conformance_file_over_a_temporary_config(pytester, toy_saved_model, monkeypatch):
    make_onnx(pytester.path / "toy.onnx")
    (pytester.path / "handlers.py").write_text(HANDLERS)
    config = write_config(pytester.path, {"models": [
        _model("good", toy_saved_model, {"handler": "handlers:correct", "batch_latency_p99_ms": 1000.0}),
        _model("bad", toy_saved_model, {"handler": "handlers:drops"}),
        _model("plain", toy_saved_model)]})
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={config}", "-p", "no:cacheprovider",
                                f"--parity-report={pytester.path / 'report'}", "-rfEs")
    # 17 checks a model. good: 14 pass (model_copies too: its model_copies=1 pipeline skipped, as Toy cannot take
    # the argument), 2 Beam-level xfails, model_update skipped (Toy keeps Beam's no-op update_model_path: it offers
    # no updates). bad: exactly_once, dead_letter, batch_extremes, multi_process and model_copies fail, latency
    # (no budget) and model_update are skipped, 2 xfails, 8 pass. plain: one row, beam_handler, skipped for want of
    # a [models.beam] table (its 17 checks deselected, not 17 skips)
    result.assert_outcomes(passed=14 + 8, failed=0 + 5, xfailed=2 + 2, skipped=1 + 2 + 1, deselected=2 + 17)
    result.stdout.fnmatch_lines(["*lost: element #*", "*FAILED*test_beam_exactly_once[[]bad[]]*",
                                 "*SKIPPED*model 'plain' has no [[]models.beam[]] table*key 'beam.handler'*"])
    report = json.loads((pytester.path / "report" / "parity-report.json").read_text())
    by = {(c["model"], c["check"]): c for c in report["checks"]}
    assert by[("good", "beam_batch_weight")]["status"] == "xfail"
    assert by[("bad", "beam_exactly_once")]["status"] == "fail"
    assert [c for m, c in by if m == "plain"] == ["beam_handler"] and by[("plain", "beam_handler")]["status"] == "skip"
    update = by[("good", "beam_model_update")]
    assert update["status"] == "skip" and "does not override update_model_path" in update["details"]["reason"]
    copies = by[("good", "beam_model_copies")]
    assert copies["status"] == "pass" and "unexpected keyword argument 'model_copies'" in copies["details"]["note"]
    (row,) = by[("good", "beam_batch_latency")]["details"]["latency"]
    assert row["batch"] == "all" and row["budget"] == 1000.0 and len(row["samples_ms"]) == 40


STOCK = textwrap.dedent('''
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    def stock(min_batch_size, max_batch_size):
        return OnnxModelHandlerNumpy(__file__.replace("stock.py", "toy.onnx"), providers=["CPUExecutionProvider"],
                                     min_batch_size=min_batch_size, max_batch_size=max_batch_size)
''')
ACCEPTED = textwrap.dedent('''
    [[known_failures]]
    model = "team"
    check = "handler_batch_extremes"
    upstream_defect = "onnx-numpy-first-output"
    reason = "we read y only, TICKET-7"
''')


def _team_run(pytester, toy_saved_model, accepted):
    make_onnx(pytester.path / "toy.onnx")  # two outputs: y = 5x, z = 2x
    (pytester.path / "stock.py").write_text(STOCK)
    if accepted:
        (pytester.path / "expectations.toml").write_text(ACCEPTED)
    config = write_config(pytester.path, {"models": [_model("team", toy_saved_model, {"handler": "stock:stock"})]})
    report = pytester.path / "report"
    result = pytester.runpytest(str(CONFORMANCE), f"--parity-config={config}", "-p", "no:cacheprovider",
                                "-p", "no:xdist", f"--parity-report={report}", "-k",
                                "handler_batch_extremes or handler_results_stable")
    by = {c["check"]: c for c in json.loads((report / "parity-report.json").read_text())["checks"]}
    return result, by


def test_a_teams_stock_onnx_handler_over_two_outputs_fails_naming_the_upstream_defect(pytester, toy_saved_model):
    result, by = _team_run(pytester, toy_saved_model, accepted=False)
    result.assert_outcomes(passed=1, failed=1)  # results_stable passes: the defect does not reach it
    out = result.stdout.str()
    assert "inference has outputs ['y'], the reference has ['y', 'z']" in out
    assert "known upstream defect 'onnx-numpy-first-output'" in out and "onnx_inference.py:" in out
    check = by["handler_batch_extremes"]
    assert check["status"] == "fail" and check["details"]["upstream_defects"][0]["id"] == "onnx-numpy-first-output"
    assert result.ret == 1


def test_the_teams_own_known_failure_makes_it_an_xfail(pytester, toy_saved_model):
    result, by = _team_run(pytester, toy_saved_model, accepted=True)
    result.assert_outcomes(passed=1, xfailed=1)
    assert by["handler_batch_extremes"]["status"] == "xfail"
    assert "onnx-numpy-first-output" in by["handler_batch_extremes"]["details"]["reason"]
    assert by["handler_batch_extremes"]["details"]["upstream_defect"] == "onnx-numpy-first-output"
    md = (pytester.path / "report" / "parity-report.md").read_text()
    assert "⚠️ xfail (upstream: Beam's defect (onnx-numpy-first-output), not your handler)" in md
