"""paritygate.report.text: each row shows the bound it actually held."""

from paritygate.report.text import held_to, statistics_text, tolerance_text


def test_a_within_candidate_check_shows_its_own_bound_not_atol_zero():
    tol = {"atol": 0.0, "rtol": 0.0, "bound": 3.2e-06, "reference_floor_max": 0.0, "k": 2,
           "source": "batch bound 10*sqrt(n)*u*max|y| (Higham & Mary 2019)"}
    row = {"output": "y", "mismatches": 0, "elements": 8, "max_abs": 1e-7, "p99_abs": 1e-7, "cosine": 1.0,
           "tolerance": tol}
    assert statistics_text(row).startswith("0/8 out of bound 3.2e-06;")
    assert "atol 0" not in statistics_text(row) and "atol 0" not in tolerance_text(tol)
    assert tolerance_text(tol) == "bound 3.2e-06 (source: batch bound 10*sqrt(n)*u*max|y| (Higham & Mary 2019))"


def test_the_reference_floor_and_exact_mode_are_named():
    assert held_to({"bound": 0.0, "reference_floor_max": 0.0}) == "bound 0 (bit-identical)"
    assert held_to({"bound": 1e-06, "reference_floor_max": 0.004, "k": 2}) == (
        "bound 1e-06, or 2 x the reference's own spread where larger (up to 0.004)")
    assert held_to({"atol": 1e-05, "rtol": 1e-05}) == "atol 1e-05/rtol 1e-05"


def test_an_xfail_names_beams_defect_only_when_it_stands_for_one():
    from paritygate.report.text import upstream_defects, upstream_note
    from tests.conftest import record_of

    beam = record_of("linear", None, "beam_metric_bytes", "xfail", {"expectations": [{"id": "onnx-numpy-num-bytes"}]})
    team = record_of("team", None, "handler_batch_extremes", "xfail", {"upstream_defect": "onnx-numpy-first-output"})
    own = record_of("bert", "fp16", "property_parity", "xfail", {"reason": "known failure: real FP16 behaviour"})
    assert upstream_defects(beam) == ["onnx-numpy-num-bytes"] and upstream_defects(own) == []
    assert upstream_note([beam]) == "upstream: Beam's defect (onnx-numpy-num-bytes), not your handler"
    assert upstream_note([beam, team, own]) == ("2 of 3 xfail upstream: Beam's defect (onnx-numpy-num-bytes, "
                                                "onnx-numpy-first-output), not your handler")
    assert upstream_note([own]) == "" and upstream_note([record_of("m", None, "c", "pass", {"upstream_defect": "x"})]) == ""


def test_a_crash_localized_names_the_node_and_its_cause():
    from tests.conftest import record_of

    check = record_of("senti", "fp16", "matches_reference", "fail", {"divergence": {
        "first_node": "emb/Cast", "op_type": "Cast", "crashed_node": "emb/GatherV2", "crash": "idx=5000 out of range",
        "cause": "node 'emb/Cast' (Cast) carries an index in float16", "verified": None}})
    from paritygate.report.text import divergence_text

    assert divergence_text(check, lambda s: f"`{s}`") == (
        "the candidate crashed at `emb/GatherV2`: idx=5000 out of range; cause: node 'emb/Cast' (Cast) carries an "
        "index in float16")
