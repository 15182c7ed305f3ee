"""paritygate.inputs.goldens: write/load round trip, tampering and manifest checks that fail loudly, reference drift,
the manifest lock under concurrent writers, and input sets (committed file or seeded fallback)."""

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from paritygate.inputs import goldens
from paritygate.inputs.goldens import GoldenError, golden_path, input_set, load_golden, reference_drift, write_golden
from paritygate.inputs.sets import InputSetError
from tests.conftest import toy_spec


@pytest.fixture
def spec(tmp_path):
    """A toy model whose config lives in tmp_path, with a one-file reference 'SavedModel'."""
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "saved_model.pb").write_bytes(b"weights v1")
    return toy_spec(source=tmp_path / "parity.toml", reference=tmp_path / "ref")


WEIGHTS = "a" * 64  # the reference's weights_sha256 (TfRunner.weights_sha256 in real runs)


def sample():
    inputs = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1)}
    outputs = {"y": 5 * inputs["x"], "z": 2 * inputs["x"], "count": np.arange(8, dtype=np.int32)}
    return inputs, outputs, WEIGHTS


def manifest(spec):
    return json.loads((goldens.golden_dir(spec) / "manifest.json").read_text())


def test_round_trip_keeps_values_and_dtypes(spec):
    inputs, outputs, _ = sample()
    labels = np.array([0, 1, 0, 1, 1, 0, 0, 1], np.int64)
    path = write_golden(spec, inputs, outputs, WEIGHTS, labels)
    assert path == golden_path(spec) == spec.source.parent / "goldens" / "toy.npz"
    g = load_golden(spec)
    assert set(g.inputs) == {"x"} and set(g.outputs) == {"y", "z", "count"}
    for want, got in ((inputs, g.inputs), (outputs, g.outputs)):
        for k in want:
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k])
    assert g.labels.dtype == np.int64 and np.array_equal(g.labels, labels)
    assert load_golden(spec).labels is not None
    assert not list(goldens.golden_dir(spec).glob("*.tmp*"))  # no temporary files left behind


def test_manifest_entry(spec):
    inputs, outputs, _ = sample()
    write_golden(spec, inputs, outputs, WEIGHTS)
    m = manifest(spec)
    assert m["schema"] == goldens.MANIFEST_SCHEMA
    entry = m["models"]["toy"]
    assert entry["file"] == "toy.npz"
    assert entry["sha256"] == goldens._sha256(golden_path(spec))
    assert set(entry["inputs"]) == {"x"} and set(entry["outputs"]) == {"y", "z", "count"}
    assert entry["weights_sha256"] == WEIGHTS
    assert entry["command"] == f"paritygate run {spec.source.name} -k 'test_goldens_reproduce[toy]' --update-goldens"
    assert entry["created"] and "tensorflow" in entry
    assert load_golden(spec).labels is None


def test_loading_never_unpickles(spec):
    inputs, outputs, _ = sample()
    outputs["strings"] = np.array([{"a": 1}, None], dtype=object)  # np.savez pickles object arrays
    write_golden(spec, inputs, outputs, WEIGHTS)
    with pytest.raises(GoldenError, match="cannot read golden .npz.*allow_pickle"):
        load_golden(spec)


def test_a_flipped_byte_fails_naming_the_file_and_its_sha256(spec):
    write_golden(spec, *sample())
    path = golden_path(spec)
    recorded = manifest(spec)["models"]["toy"]["sha256"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(GoldenError) as info:
        load_golden(spec)
    msg = str(info.value)
    assert str(path) in msg and "sha256" in msg
    assert goldens._sha256(path)[:16] in msg and recorded[:16] in msg
    assert "--update-goldens" in msg


def test_missing_manifest_entry(spec):
    write_golden(spec, *sample())
    m = manifest(spec)
    del m["models"]["toy"]
    (goldens.golden_dir(spec) / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(GoldenError, match=r"toy.npz: no golden for model 'toy' \(file or manifest entry missing\)"):
        load_golden(spec)


def test_missing_golden_file(spec):
    write_golden(spec, *sample())
    golden_path(spec).unlink()
    with pytest.raises(GoldenError, match="no golden for model 'toy'"):
        load_golden(spec)


def test_no_goldens_at_all(spec):
    with pytest.raises(GoldenError, match=r"create it with `paritygate run parity.toml -k 'test_goldens_reproduce\[toy\]' --update-goldens`"):
        load_golden(spec)


def test_array_hash_mismatch(spec):
    inputs, outputs, _ = sample()
    write_golden(spec, inputs, outputs, WEIGHTS)
    # a regenerated file whose sha256 was pasted into the manifest, but whose arrays were not recorded
    path = golden_path(spec)
    np.savez_compressed(path, **{"input:x": inputs["x"], "output:y": outputs["y"] + 1,
                                 "output:z": outputs["z"], "output:count": outputs["count"]})
    m = manifest(spec)
    m["models"]["toy"]["sha256"] = goldens._sha256(path)
    (goldens.golden_dir(spec) / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(GoldenError, match=r"toy.npz: output 'y' does not match its manifest hash"):
        load_golden(spec)


def test_golden_inputs_must_match_the_config(spec):
    write_golden(spec, {"w": np.zeros((2, 1), np.float32)}, {"y": np.zeros((2, 1), np.float32)}, WEIGHTS)
    with pytest.raises(GoldenError, match=r"golden inputs \['w'\] differ from the config's \['x'\]"):
        load_golden(spec)


def test_corrupt_manifest(spec):
    write_golden(spec, *sample())
    (goldens.golden_dir(spec) / "manifest.json").write_text("{not json")
    with pytest.raises(GoldenError, match="manifest.json: cannot read golden manifest: not valid JSON"):
        load_golden(spec)


def test_reference_drift(spec):
    assert reference_drift(spec, WEIGHTS) == (None, WEIGHTS)  # no goldens yet
    write_golden(spec, *sample())
    assert reference_drift(spec, WEIGHTS) is None
    assert reference_drift(spec, "b" * 64) == (WEIGHTS, "b" * 64)


# -- the manifest lock ------------------------------------------------------------------------------
WRITES = 12


def _write_models(prefix, source, reference, barrier):
    spec = toy_spec(source=source, reference=reference)
    inputs, outputs, _ = sample()
    barrier.wait()
    for i in range(WRITES):
        write_golden(spec.__class__(**{**spec.__dict__, "name": f"{prefix}{i}"}), inputs, outputs, WEIGHTS)


def test_concurrent_writers_both_end_up_in_the_manifest(spec, monkeypatch):
    # the spawned children import this module as tests.inputs.test_goldens, with this process's sys.path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold TensorFlow's threads
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_write_models, args=(p, spec.source, spec.reference, barrier)) for p in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    names = set(manifest(spec)["models"])
    assert names == {f"{p}{i}" for p in "ab" for i in range(WRITES)}
    for name in ("a0", f"b{WRITES - 1}"):
        load_golden(toy_spec(source=spec.source, reference=spec.reference, name=name))


# -- input sets -------------------------------------------------------------------------------------
def two_input_spec(tmp_path):
    return toy_spec(source=tmp_path / "parity.toml", reference=tmp_path / "ref",
                    inputs={"ids": ((-1, 6), "int32", (0, 99)), "x": ((-1, 2), "float32", (0.1, 0.7))})


def test_input_set_from_the_committed_file(tmp_path):
    spec = two_input_spec(tmp_path)
    (tmp_path / "inputs").mkdir()
    ids, x = np.arange(18, dtype=np.int32).reshape(3, 6), np.full((3, 2), 0.5, np.float32)
    labels = np.array([1, 0, 1])
    np.savez(tmp_path / "inputs" / "toy.npz", x=x, ids=ids, __labels__=labels)
    arrays, got_labels = input_set(spec)
    assert list(arrays) == ["ids", "x"]  # the config's order
    assert np.array_equal(arrays["ids"], ids) and np.array_equal(arrays["x"], x)
    assert np.array_equal(got_labels, labels)


def test_input_set_file_lacking_an_input(tmp_path):
    spec = two_input_spec(tmp_path)
    (tmp_path / "inputs").mkdir()
    np.savez(tmp_path / "inputs" / "toy.npz", x=np.zeros((3, 2), np.float32))
    with pytest.raises(InputSetError, match=r"inputs/toy.npz: input set lacks input\(s\) \['ids'\]"):
        input_set(spec)


def test_input_set_seeded_fallback(tmp_path):
    spec = two_input_spec(tmp_path)
    first, labels = input_set(spec, count=5)
    again, _ = input_set(spec, count=5)
    other, _ = input_set(spec, count=5, seed=1)
    assert labels is None and list(first) == ["ids", "x"]
    assert first["ids"].shape == (5, 6) and first["ids"].dtype == np.int32
    assert first["x"].shape == (5, 2) and first["x"].dtype == np.float32
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["x"], other["x"])
    assert first["ids"].min() >= 0 and first["ids"].max() <= 99
    assert first["x"].astype(np.float64).min() >= 0.1 and first["x"].astype(np.float64).max() <= 0.7


# -- several shapes (a dynamic input's profile) ---------------------------------------------------------------
def dynamic_spec(tmp_path):
    from dataclasses import replace

    spec = toy_spec(source=tmp_path / "parity.toml", reference=tmp_path / "ref",
                    inputs={"image": ((-1, -1, -1, 3), "float32", (-1.0, 1.0))})
    profile = ((1, 4, 4, 3), (2, 8, 8, 3), (2, 16, 12, 3))  # min, opt, max
    return replace(spec, max_batch=2, inputs={"image": replace(spec.inputs["image"], profile=profile)})


def shape_groups_of(spec, sizes):
    """[(inputs, outputs, labels)] per (h, w): outputs a 2-channel map of each input's own shape."""
    rng = np.random.default_rng(0)
    groups = []
    for h, w in sizes:
        x = rng.uniform(-1, 1, (2, h, w, 3)).astype(np.float32)
        groups.append(({"image": x}, {"map": x[..., :2] * 2}, np.array([0, 1])))
    return groups


def test_goldens_of_several_shapes_round_trip_by_shape_suffix(tmp_path):
    spec = dynamic_spec(tmp_path)
    groups = shape_groups_of(spec, [(4, 4), (8, 8), (15, 11)])
    write_golden(spec, *goldens.group_arrays(groups)[:2], WEIGHTS, goldens.group_arrays(groups)[2])
    with np.load(golden_path(spec)) as f:
        assert set(f.files) >= {"input:image@4x4x3", "output:map@15x11x3", "label@8x8x3"}, f.files
    assert set(manifest(spec)["models"]["toy"]["outputs"]) == {"map@4x4x3", "map@8x8x3", "map@15x11x3"}
    g = load_golden(spec)
    assert [x.inputs["image"].shape for x in g.groups] == [(2, 15, 11, 3), (2, 4, 4, 3), (2, 8, 8, 3)]
    for x in g.groups:
        assert np.array_equal(x.outputs["map"], x.inputs["image"][..., :2] * 2) and list(x.labels) == [0, 1]


@pytest.mark.parametrize("drop, words", [
    ("output:map@8x8x3", ["golden lacks ['output:map@8x8x3']", "every output ['map'] at every shape"]),
    ("input:image@8x8x3", ["['output:map@8x8x3'] have no golden inputs of their shape"]),
])
def test_a_golden_of_several_shapes_lacking_an_array_names_it(tmp_path, drop, words):
    spec = dynamic_spec(tmp_path)
    inputs, outputs, labels = goldens.group_arrays(shape_groups_of(spec, [(4, 4), (8, 8)]))
    kind, _, key = drop.partition(":")
    del (inputs if kind == "input" else outputs)[key]
    write_golden(spec, inputs, outputs, WEIGHTS, labels)
    with pytest.raises(GoldenError) as err:
        load_golden(spec)
    assert all(w in str(err.value) for w in words) and str(golden_path(spec)) in str(err.value), str(err.value)


def test_a_golden_shape_outside_the_profile_names_the_array(tmp_path):
    spec = dynamic_spec(tmp_path)
    inputs, outputs, labels = goldens.group_arrays(shape_groups_of(spec, [(4, 4), (20, 8)]))
    write_golden(spec, inputs, outputs, WEIGHTS, labels)
    with pytest.raises(InputSetError, match=r"array 'image' is float32\[2, 20, 8, 3\].*max \[2, 16, 12, 3\]"):
        load_golden(spec)


def test_goldens_are_made_at_the_profiles_min_opt_and_max(tmp_path):
    spec = dynamic_spec(tmp_path)
    assert [g[0]["image"].shape for g in goldens.input_groups(spec, count=3)] == [
        (3, 4, 4, 3), (3, 8, 8, 3), (3, 16, 12, 3)]
    (tmp_path / "inputs").mkdir()  # an input set's own shapes first; only the corners it lacks are drawn
    np.savez(tmp_path / "inputs" / "toy.npz", **{"image@8x8x3": np.zeros((1, 8, 8, 3), np.float32),
                                                 "image@9x5x3": np.zeros((1, 9, 5, 3), np.float32)})
    assert [g[0]["image"].shape for g in goldens.input_groups(spec, count=3)] == [
        (1, 8, 8, 3), (1, 9, 5, 3), (3, 4, 4, 3), (3, 16, 12, 3)]


# -- the conformance check end to end (a real TF SavedModel; pytester subprocesses) --------------------------
def test_a_golden_error_is_the_suites_error_not_a_candidate_failure():
    from paritygate.verdict import SuiteError

    assert issubclass(GoldenError, SuiteError) and not issubclass(GoldenError, AssertionError)


def _goldens_run(pytester, *args):
    from pathlib import Path

    report = pytester.path / "report"
    conformance = Path(__file__).resolve().parents[2] / "conformance" / "test_goldens.py"
    result = pytester.runpytest(str(conformance), f"--parity-config={pytester.path / 'parity.toml'}",
                                           f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist",
                                           "-rA", *args)
    [check] = json.loads((report / "parity-report.json").read_text())["checks"]
    return result, check, (report / "parity-report.md").read_text()


@pytest.mark.tf
@pytest.mark.slow
def test_update_goldens_is_regenerated_and_a_tampered_golden_is_an_error(pytester, toy_saved_model):
    pytest.importorskip("tensorflow")
    from tests.conftest import write_config

    write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "precisions": ["fp32"], "max_batch": 4,
        "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}}}]})
    result, check, markdown = _goldens_run(pytester, "--update-goldens")
    assert result.ret == 0
    assert check["status"] == "regenerated", check  # not "pass": nothing was judged
    assert check["details"]["action"] == "regenerated" and "outputs" not in check["details"]
    assert result.parseoutcomes() == {"regenerated": 1}
    assert "♻️ regenerated" in markdown
    assert "paritygate: runtime onnxruntime, 1 checks: 0 pass, 0 fail, 0 error, 0 inconclusive, 1 regenerated" in result.stdout.str()

    result, check, _ = _goldens_run(pytester)  # a plain run now judges today's TF against the new goldens
    assert result.ret == 0 and check["status"] == "pass"

    path = pytester.path / "goldens" / "toy.npz"
    path.write_bytes(path.read_bytes() + b"tampered")
    report = pytester.path / "report-tampered"
    result = pytester.runpytest(str(Path(__file__).resolve().parents[2] / "conformance" / "test_goldens.py"),
                                           f"--parity-config={pytester.path / 'parity.toml'}",
                                           f"--parity-report={report}", "-p", "no:cacheprovider", "-p", "no:xdist")
    # the suite's data is broken: the validation pass stops the run before any check (never a candidate failure)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    data = json.loads((report / "parity-report.json").read_text())
    assert data["checks"] == [] and len(data["validation"]["problems"]) == 1
    result.stderr.fnmatch_lines([f"ERROR: *parity.toml: model 'toy': {path}: sha256 * does not match the manifest's*"])


@pytest.mark.tf
@pytest.mark.slow
def test_goldens_reproduce_with_outputs_mapped_to_other_candidate_names(pytester, toy_saved_model):
    """Goldens hold the reference's outputs and goldens_reproduce runs TensorFlow again: both sides carry the
    reference's names, whatever ``[models.outputs]`` maps them to on the candidate (found on basic-pitch, whose ONNX
    names its outputs StatefulPartitionedCall:0..2: the check failed on its own fresh goldens)."""
    pytest.importorskip("tensorflow")
    from tests.conftest import make_onnx, scale, write_config

    onnx_path = make_onnx(pytester.path / "renamed.onnx", scale("y_c", 5.0), scale("z_c", 2.0), outputs=("y_c", "z_c"))
    write_config(pytester.path, {"models": [{
        "name": "toy", "reference": str(toy_saved_model), "onnx": str(onnx_path), "precisions": ["fp32"],
        "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32", "range": [-1.0, 1.0]}},
        "outputs": {"y": "y_c", "z": "z_c"}}]})
    result, check, _ = _goldens_run(pytester, "--update-goldens")
    assert result.ret == 0 and check["status"] == "regenerated", check
    result, check, _ = _goldens_run(pytester)
    assert result.ret == 0 and check["status"] == "pass", (check, result.stdout.str()[-2000:])
