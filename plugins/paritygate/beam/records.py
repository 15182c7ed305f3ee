"""What a pipeline run sends back: each output as a record (``Emitted``, a ``DeadBatch``, a batch trace), written
by the workers to files with Beam's FileSystems (``WriteRecords``) and read back by the launching process
(``read_records``), so nothing relies on the pipeline running in this process. Imports apache_beam."""

import contextlib
import pickle
import uuid
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import PredictionResult

from paritygate.beam.contract import HandlerContractError, digest, normalise_inference
from paritygate.beam.handlers import BatchTrace, unkeyed


@dataclass
class Emitted:
    key: object
    has_key: bool
    digest: str
    inference: dict = None  # candidate output name -> array
    error: str = None  # why the output could not be read as a PredictionResult


@dataclass
class DeadBatch:
    elements: list  # (key, has_key, digest)
    error: str


class ToRecord:
    """A RunInference output (or a ``BatchTrace``) as a (kind, record) pair: ``Emitted`` per element."""

    def __init__(self, spec, output_names, keyed):
        self.spec, self.output_names, self.keyed = spec, output_names, keyed

    def __call__(self, output):
        if isinstance(output, BatchTrace):
            return "trace", output
        key, has_key = None, False
        if self.keyed and isinstance(output, tuple) and len(output) == 2 and not isinstance(output, PredictionResult):
            (key, output), has_key = output, True
        if not isinstance(output, PredictionResult):
            return "result", Emitted(key, has_key, None, error=f"output is a {type(output).__name__}, "
                                                              "not a PredictionResult")
        try:
            inference = normalise_inference(self.spec, self.output_names, output.inference)
            return "result", Emitted(key, has_key, digest(output.example), inference)
        except HandlerContractError as err:
            return "result", Emitted(key, has_key, digest(output.example), error=str(err))


def dead_record(dead):
    """A dead-letter batch of ``with_exception_handling`` as a (kind, ``DeadBatch``) pair."""
    batch, (exc_type, exc_repr, _) = dead
    elements = [(e[0], True, digest(unkeyed(e))) if isinstance(e, tuple) else (None, False, digest(e))
                for e in batch]
    return "dead", DeadBatch(elements, f"{getattr(exc_type, '__name__', exc_type)}: {exc_repr[:300]}")


class WriteRecords(beam.DoFn):
    """Each bundle's records to one pickle file under ``folder`` (Beam FileSystems: local, gs://, ...)."""

    def __init__(self, folder):
        self.folder = folder

    def start_bundle(self):
        self.records = []

    def process(self, record):
        self.records.append(record)

    def finish_bundle(self):
        if self.records:
            with FileSystems.create(f"{self.folder}/{uuid.uuid4().hex}.pkl") as f:
                f.write(pickle.dumps(self.records))


def read_records(folder):
    """The (kind, record) pairs written under ``folder`` (``WriteRecords``, ``handlers.CountedLoad``); the folder
    is deleted."""
    try:
        files = FileSystems.match([f"{folder}/*.pkl"])[0].metadata_list
    except Exception:  # noqa: BLE001 - nothing was written (the pipeline failed before a bundle finished)
        files = []
    records = []
    for meta in files:
        with FileSystems.open(meta.path) as f:
            records.extend(pickle.loads(f.read()))
    with contextlib.suppress(Exception):  # best effort: the folder is ours and nobody else reads it
        FileSystems.delete([m.path for m in files] + ([folder] if FileSystems.exists(folder) else []))
    return records
