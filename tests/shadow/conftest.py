"""Fixtures of the shadow tests: the bundled mobilenet classifier (the zoo, built from committed weights) and
recorded-like traffic generated at test time from its held-out input set (paritygate.shadow.synthetic).

    mobilenet_spec        the bundled config's mobilenet ModelSpec
    mobilenet_outputs     the reference's output names
    traffic(n, ...)       session-cached TFRecord shards of n perturbed examples (+ bad records)
"""

import pytest


@pytest.fixture(scope="session")
def mobilenet_spec():
    from paritygate.models.bundled import fixtures_dir, zoo_module
    from paritygate.models.config import load_config

    zoo_module("build").ensure_built()
    return next(m for m in load_config(fixtures_dir() / "parity.toml") if m.name == "mobilenet")


@pytest.fixture(scope="session")
def mobilenet_outputs(mobilenet_spec):
    from paritygate.backend.tf.runner import TfRunner

    return list(TfRunner(mobilenet_spec.reference, mobilenet_spec.signature).activate().output_names)


@pytest.fixture(scope="session")
def traffic(tmp_path_factory, mobilenet_spec):
    from paritygate.models.bundled import fixtures_dir
    from paritygate.shadow.synthetic import write_tfrecords

    made = {}

    def make(n, shards=2, bad=0, seed=0):
        key = (n, shards, bad, seed)
        if key not in made:
            folder = tmp_path_factory.mktemp(f"traffic-{n}-{shards}-{bad}-{seed}")
            write_tfrecords(folder, mobilenet_spec, fixtures_dir() / "inputs" / "mobilenet_heldout.npz", n, shards,
                            seed, bad)
            made[key] = f"{folder}/*.tfrecord"
        return made[key]

    return make
