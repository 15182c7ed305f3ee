"""paritygate.beam.tf_handler: the suite's TF ModelHandler over numpy, which needs no tensorflow_hub."""

import functools
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("tensorflow")

from paritygate.beam import checks, direct
from paritygate.beam.expectations import expectations_for, match

pytestmark = [pytest.mark.beam, pytest.mark.tf]
BEAM_LEVEL = {"beam_batch_weight", "beam_maybe_keyed_mixed"}  # expectations.toml: every handler meets these


def tf_factory(saved_model, min_batch_size, max_batch_size):
    from paritygate.beam.tf_handler import TFNumpyHandler

    return TFNumpyHandler(saved_model, min_batch_size=min_batch_size, max_batch_size=max_batch_size)


def test_runs_a_saved_model_signature_and_pickles(toy_saved_model):
    handler = tf_factory(toy_saved_model, 1, 4)
    handler = pickle.loads(pickle.dumps(handler))  # holds paths only: what a Beam worker receives
    model = handler.load_model()
    batch = [np.array([1.0], np.float32), np.array([-0.5], np.float32)]
    results = handler.run_inference(batch, model)
    assert [r.example for r in results] == batch
    np.testing.assert_allclose([r.inference["y"][0] for r in results], [5.0, -2.5], rtol=1e-6)
    np.testing.assert_allclose([r.inference["z"][0] for r in results], [2.0, -1.0], rtol=1e-6)
    assert all(r.inference["y"].base is None for r in results)  # copies: a later batch cannot change them
    assert handler.get_num_bytes(batch) == 8
    assert handler.batch_elements_kwargs() == {"min_batch_size": 1, "max_batch_size": 4}


def test_a_lent_reference_serves_the_next_load_once(toy_saved_model):
    """``lending``: the first load_model of that SavedModel and signature in this process takes the runner (no
    second load: what paritygate shadow's in-process pipeline serves from); the next one, and any after leaving,
    loads its own."""
    from paritygate.backend.tf.runner import TfRunner
    from paritygate.beam.tf_handler import lending

    runner = TfRunner(toy_saved_model).activate()
    handler = pickle.loads(pickle.dumps(tf_factory(toy_saved_model, 1, 4)))
    with lending(runner):
        assert handler.load_model() is runner
        again = handler.load_model()
        assert again is not runner and again.output_names == runner.output_names
    with lending(runner):
        pass
    assert handler.load_model() is not runner


def test_bad_elements_and_arguments_are_named(toy_saved_model):
    from paritygate.beam.tf_handler import TFNumpyHandler

    with pytest.raises(ValueError, match="expected 'module:callable'"):
        TFNumpyHandler(toy_saved_model, custom_objects="no_colon")
    handler = tf_factory(toy_saved_model, 1, 4)
    with pytest.raises(ValueError, match="takes no inference_args"):
        handler.validate_inference_args({"training": True})
    with pytest.raises(Exception, match="not a TensorFlow SavedModel"):
        TFNumpyHandler(toy_saved_model.parent / "missing").load_model()


def test_conforms_to_every_runinference_check(toy_reference, toy_saved_model):
    from paritygate.beam.contract import HandlerUnderTest
    from tests.conftest import toy_spec

    spec = toy_spec(reference=toy_saved_model, max_batch=4, beam={"handler": "test_tf_handler:tf_factory"})
    subject = HandlerUnderTest.from_spec(spec, toy_reference, factory=functools.partial(tf_factory, toy_saved_model))
    known = expectations_for()
    for name, check in {**checks.PIPELINE_CHECKS, **direct.DIRECT_CHECKS}.items():
        result, expected = check(subject), match(name, subject, known)
        assert result.passed != bool(expected), (name, result.failures, [e.id for e in expected])
        assert bool(expected) == (name in BEAM_LEVEL), name


def test_needs_neither_tensorflow_hub_nor_beams_tensorflow_inference(toy_saved_model):
    """In a process where both cannot be imported (a plain `pip install 'paritygate[cpu]'`), the handler loads
    a model and answers."""
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("tensorflow_hub", "tf_keras") or name.endswith("tensorflow_inference"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        from paritygate.beam.tf_handler import TFNumpyHandler
        h = TFNumpyHandler({str(toy_saved_model)!r}, max_batch_size=2)
        out = h.run_inference([np.array([2.0], np.float32)], h.load_model())
        assert float(out[0].inference["y"][0]) == 10.0, out
        assert not any(m.startswith(("tensorflow_hub", "tf_keras")) for m in sys.modules)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
