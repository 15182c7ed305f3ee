"""Repeated runs of beam_multi_process and beam_model_copies over a handler whose model copies share one staging
buffer, and over its correct control, at 0, 2 and 50 ms of simulated device time: how often each check catches the
race (not collected by the test command; the tests run it once, tests/beam/test_overlap.py). Run it by name:

    REPS=10 pytest tests/beam/probe_overlap.py -p no:xdist -s -q | grep PROBE
"""

import functools
import os

import pytest

pytest.importorskip("apache_beam")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorflow")

from paritygate.beam.copies import model_copies
from paritygate.beam.multiprocess import multi_process
from tests.beam import toy_handlers as toys


@pytest.mark.parametrize("device", [0.0, 0.002, 0.05])
@pytest.mark.parametrize("factory", ["shares_staging", "own_staging"])
@pytest.mark.parametrize("rep", range(int(os.environ.get("REPS", "3"))))
def test_probe(toy_subject, device, rep, factory):
    bound = functools.partial(getattr(toys, factory), device_seconds=device)
    bound.__name__ = factory
    subject = toy_subject(bound)
    mp, mc = multi_process(subject), model_copies(subject)
    waits = [(m["waited_s"], m["model_waited_s"]) for m in mp.details["overlap"]]
    print(f"\nPROBE {factory} device={device} rep={rep} multi_process={'fail' if mp.failures else 'pass'} "
          f"model_copies={'fail' if mc.failures else 'pass'} entry/model waits (s)={waits}")
