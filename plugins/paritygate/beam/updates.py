"""``beam_model_update``: the handler under RunInference's model updates (``model_metadata_pcoll``).

Two pipelines over the same elements (2*max_batch+1: a short final batch), each ``RunInference(...,
model_metadata_pcoll=...)``: "before" with an empty side input, which keeps the default model (Beam:
EmptySideInput -> ``update_model(None)``, apache_beam/ml/inference/base.py:2151), and "after" with
``ModelMetadata(model_id=<update target>)``, for which Beam calls ``update_model_path(model_id)`` and reloads
(base.py:2163, :2004). Not one pipeline with a window before and a window after the update: a batch pipeline
processes windows in no set order, and a window with an empty side input processed after the update's window
is served by the update (observed here with a correct handler: base.py:2004 sets the handler's path only when a
side input names one, so reloading the "default" loads whatever path the handler last got). The check holds:

    before  every result matches the reference; a model_id, when present, is the handler's own (not the update's)
    after   every result matches the update target's outputs (the reference + ``UPDATE_OFFSET``); a model_id,
            when present, is the update target's path

Only what the handler claims is judged (``update_claim``): the check runs when the handler's class overrides
``update_model_path`` (Beam's base ``ModelHandler.update_model_path`` is a no-op, base.py:291: a handler that keeps
it takes no updates) or the config says the pipeline uses model updates (``[models.beam] model_updates = true``);
otherwise it is a ``skip`` that says why. Judged by the outputs: ``PredictionResult.model_id`` is metadata that
custom handlers often leave empty, so a missing one is recorded in the details (``model_id_absent``), never a
failure; one that is present must name the model that answered.

The update target by default is a copy of the candidate fp32 ONNX with ``UPDATE_OFFSET`` added to every numeric
output, built by the suite (cached); ``[models.beam] update_model = "file"`` names another file whose outputs
must likewise be the reference's + UPDATE_OFFSET (for handlers that load other formats). A handler that ignores
``update_model_path`` keeps answering with the old model after the update, and fails.
"""

import gc
import warnings

from paritygate.beam.checks import MAX_LISTED, beam_result, compare_element
from paritygate.beam.contract import HandlerContractError

UPDATE_OFFSET = 1.0  # added to every numeric output: 1e5x the fp32 atol (comparator/tolerance.py), so unmistakable
UPDATE_NAME = "paritygate_update"


def update_claim(subject):
    """None when the handler claims model updates (the check runs), else the skip reason."""
    from paritygate.beam.contract import overrides

    spec = subject.spec
    if (spec.beam or {}).get("model_updates") is True or overrides(subject.make(1, spec.max_batch),
                                                                   "update_model_path"):
        return None
    return (f"{subject.name} does not override update_model_path (Beam's ModelHandler.update_model_path is a "
            "no-op, apache_beam/ml/inference/base.py:291: the handler takes no model updates) and "
            f"{spec.where('beam.model_updates')} is not true: beam_model_update judges only a handler that offers "
            "updates; set model_updates = true if your pipeline sends them (model_metadata_pcoll)")


def update_target(spec):
    """The file ``update_model_path`` receives: ``[models.beam] update_model`` (beside the config), else the
    suite-built shifted copy of the candidate ONNX."""
    named = (spec.beam or {}).get("update_model")
    if named:
        path = spec.source.parent / named
        if not path.exists() and not path.is_symlink():
            raise HandlerContractError(f"{spec.where('beam.update_model')}: {path} does not exist; expected the "
                                       f"model file the handler loads after an update (outputs: the reference's + "
                                       f"{UPDATE_OFFSET})")
        from paritygate.files import FileRefused, check_file

        try:
            check_file(path, "the model file of an update", "model")
        except FileRefused as err:
            raise HandlerContractError(f"{spec.where('beam.update_model')}: {err}") from None
        return str(path.resolve())
    from paritygate.backend.cache import cached_file, hash_path, key_of
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact

    source = onnx_artifact(spec, "fp32")
    key = key_of(source=hash_path(source), offset=UPDATE_OFFSET, build="update-1")
    return str(cached_file("onnx", f"{spec.name}-update-{key}", ".onnx", lambda tmp: shifted_copy(source, tmp)))


def shifted_copy(source, target, offset=UPDATE_OFFSET):
    """Save ``source`` with ``offset`` added to every float and integer output (bool and string outputs kept)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    for out in graph.output:
        elem = out.type.tensor_type.elem_type
        if elem in (onnx.TensorProto.BOOL, onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            continue
        before = f"{out.name}__before_update"
        for node in graph.node:
            node.output[:] = [before if o == out.name else o for o in node.output]
            node.input[:] = [before if i == out.name else i for i in node.input]
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        graph.initializer.append(numpy_helper.from_array(dtype.type(offset).reshape(()), f"{out.name}__offset"))
        graph.node.append(helper.make_node("Add", [before, f"{out.name}__offset"], [out.name],
                                           name=f"{out.name}__update"))
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


def shifted(ref):
    """The update target's expected outputs: the reference's + UPDATE_OFFSET (bool outputs unchanged)."""
    import numpy as np

    return {k: v if np.asarray(v).dtype == bool else np.asarray(v) + np.asarray(UPDATE_OFFSET).astype(np.asarray(v).dtype)
            for k, v in ref.items()}


def update_case(spec):
    from paritygate.beam.pipeline import Case

    m = spec.max_batch
    return Case(2 * m + 1, 1, m, seed=31, runner="FnApiRunner")  # batches growing from 1: a short final one


def run_update(subject, case, target):
    """(results as (element digest, inference, model_id), pipeline error or None, batch sizes) of one pipeline
    whose side input holds the update to ``target`` (None: an empty side input)."""
    import apache_beam as beam
    from apache_beam.ml.inference.base import ModelMetadata, RunInference

    from paritygate.beam.pipeline import case_elements, failure_text, handler_stack, make_pipeline, output_folder
    from paritygate.beam.records import WriteRecords, read_records

    folder, error = output_folder(case.runner, subject.options), None
    with warnings.catch_warnings():  # a leaked file is reported by handler_load_model, not here
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            p = make_pipeline(case.runner, subject.options)
            update = p | "Update" >> beam.Create([ModelMetadata(target, UPDATE_NAME)] if target else [])
            out = case_elements(p, subject.spec, case) | "RunInference" >> RunInference(handler_stack(subject, case), model_metadata_pcoll=update)
            _ = (out | "Records" >> beam.Map(_Record(subject.spec, subject.output_names))
                 | "Write" >> beam.ParDo(WriteRecords(folder)))
            p.run().wait_until_finish()
            gc.collect()  # the handler's leaked files close here, inside the filter
        except Exception as err:  # noqa: BLE001 - the pipeline failing is the finding
            error = failure_text(err)
    records = read_records(folder)
    return [r for kind, r in records if kind == "result"], error, [r for kind, r in records if kind == "trace"]


class _Record:
    def __init__(self, spec, output_names):
        self.spec, self.output_names = spec, output_names

    def __call__(self, output):
        from paritygate.beam.contract import digest, normalise_inference
        from paritygate.beam.handlers import BatchTrace

        if isinstance(output, BatchTrace):
            return "trace", output.size
        try:
            inference = normalise_inference(self.spec, self.output_names, output.inference)
        except (HandlerContractError, AttributeError) as err:
            inference = str(err)
        return "result", (digest(getattr(output, "example", None)), inference, getattr(output, "model_id", None))


def update_failures(subject, inputs, runs, target):
    """``runs``: {"before": results, "after": results} of the two pipelines."""
    refs = subject.references([ex for _, _, _, ex in inputs])
    failures, seen, default_ids = [], set(), set()
    for phase, d, inference, model_id in ((ph, *r) for ph, rs in runs.items() for r in rs):
        # elements with equal contents (an input-set row drawn twice) share a digest: each result takes the
        # first one of them not yet seen in its phase
        i = next((i for i, (_, _, dd, _) in enumerate(inputs) if dd == d and (phase, i) not in seen), None)
        if i is None:
            failures.append(f"a result ({phase} the update): its example is none of the elements sent, or one "
                            "sent once came back twice")
            continue
        seen.add((phase, i))
        want = refs[i] if phase == "before" else shifted(refs[i])
        problem = inference if isinstance(inference, str) else compare_element(subject, want, inference)
        if problem:
            whose = "the original model's" if phase == "before" else f"the update target's ({target})"
            failures.append(f"element #{i} ({phase} the update): not {whose} outputs: {problem}")
        if phase == "after" and model_id is not None and model_id != target:
            failures.append(f"element #{i} (after the update): model_id {model_id!r}, not the update's {target!r}")
        elif phase == "before":
            default_ids.add(model_id)
    failures += [f"lost: element #{i} ({phase} the update)" for phase in runs for i in range(len(inputs))
                 if (phase, i) not in seen]
    if target in default_ids:
        failures.append("results before the update (empty side input) carry the update's model_id")
    if len(default_ids - {None}) > 1:
        failures.append(f"results before the update carry several model_ids {sorted(default_ids - {None})}")
    return failures[:MAX_LISTED] + ([f"... and {len(failures) - MAX_LISTED} more"] if len(failures) > MAX_LISTED else [])


def model_update(subject):
    from paritygate.beam.pipeline import case_inputs

    case, target = update_case(subject.spec), update_target(subject.spec)
    (before, error_before, sizes_before), (after, error_after, sizes_after) = (run_update(subject, case, None),
                                                                               run_update(subject, case, target))
    errors = [f"pipeline {phase} the update failed: {e}" for phase, e in (("before", error_before),
                                                                            ("after", error_after)) if e]
    inputs = case_inputs(subject.spec, case)
    failures = errors or update_failures(subject, inputs, {"before": before, "after": after}, target)
    absent = {phase: sum(1 for *_, m in rs if m is None) for phase, rs in (("before", before), ("after", after))}
    info = {"precision": subject.precision, "update_target": target, "update_offset": UPDATE_OFFSET,
            "elements": case.count, "batch_sizes": {"before": sizes_before, "after": sizes_after},
            "model_ids": {"before": sorted({str(m) for *_, m in before}), "after": sorted({str(m) for *_, m in after})},
            "judged_by": "outputs: before the update the reference's, after it the update target's"}
    if any(absent.values()):
        info["model_id_absent"] = {**absent, "note": "PredictionResult.model_id left empty: recorded, not judged "
                                   "(the outputs tell which model answered)"}
    return beam_result("beam_model_update", subject, failures, info)
