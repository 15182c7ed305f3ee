"""Handler-level checks: direct calls to the handler the factory returns, no pipeline.

    handler_load_model        ``load_model`` succeeds, returns a weakly referenceable model (Beam's shared cache
                              needs it) and leaves no file open (a leak per load, per worker)
    handler_results_stable    ``load_model`` once, then ``run_inference`` on consecutive batches: results already
                              returned do not change after later calls (no views into a reused output buffer)
    handler_batch_extremes    batches of 1 and of max_batch: one result per element, in order, each example its own
                              element and each inference the reference's within the handler's precision policy
    handler_num_bytes         ``get_num_bytes`` exactly the batch's bytes (``contract.expected_num_bytes``), for arrays
                              that own their data and as Beam's coder delivers them (views: ``sys.getsizeof`` counts
                              no data there)
    handler_batch_kwargs      ``batch_elements_kwargs`` carries the min/max the factory was given, and
                              ``beam.BatchElements`` accepts it
    handler_metrics_namespace ``get_metrics_namespace`` is a non-empty string
"""

import gc
import warnings
import weakref

import numpy as np

from paritygate.beam.checks import beam_result, compare_element
from paritygate.beam.contract import (
    HandlerContractError,
    apply_fns,
    beam_decoded,
    describe,
    digest,
    element_of,
    expected_num_bytes,
    handler_fns,
    normalise_inference,
    same_values,
)
from paritygate.inputs.strategies import sample_inputs

STABLE_CALLS = 3  # consecutive run_inference calls; the first call's results are re-read after the last


def batch_of(spec, n, seed):
    arrays = sample_inputs(spec, n, np.random.default_rng(seed))
    return [element_of(spec, {k: np.array(v[i]) for k, v in arrays.items()}) for i in range(n)]


def _result(name, subject, failures, **info):
    return beam_result(name, subject, failures, {"precision": subject.precision, **info})


def _call(subject, handler, model, batch):
    """run_inference on the preprocessed batch, listed and postprocessed (the handler's with_preprocess_fn /
    with_postprocess_fn functions, as RunInference applies them), each inference normalised (copied) at once."""
    pre, post = handler_fns(handler)
    results = [apply_fns(post, r) for r in handler.run_inference([apply_fns(pre, e) for e in batch], model)]
    return results, [_inference(subject, r) for r in results]


def _inference(subject, result):
    try:
        return normalise_inference(subject.spec, subject.output_names, result.inference)
    except (HandlerContractError, AttributeError) as err:
        return f"unreadable result: {err}"


def _loaded(subject, name):
    """(handler, model, None), or (None, None, failed result) when load_model raises. A file load_model
    leaves open is reported by handler_load_model, not by every check."""
    handler = subject.make(1, subject.spec.max_batch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            return handler, handler.load_model(), None
    except Exception as err:  # noqa: BLE001 - the handler's own error type varies
        return None, None, _result(name, subject, [f"load_model raised {type(err).__name__}: {err}"])


def load_model(subject):
    """load_model succeeds, returns what Beam's shared model cache can hold (it keeps a weak reference:
    apache_beam/utils/shared.py:136), and leaves no file or socket open (Python's ResourceWarning)."""
    handler = subject.make(1, subject.spec.max_batch)
    failures = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            model = handler.load_model()
        except Exception as err:  # noqa: BLE001 - the handler's own error type varies
            failures.append(f"load_model raised {type(err).__name__}: {err}")
        else:
            failures += _weakref_problem(model)
            del model
        gc.collect()
    failures += [f"load_model left a resource open: {w.message}" for w in caught
                 if issubclass(w.category, ResourceWarning)]
    return _result("handler_load_model", subject, failures)


def _weakref_problem(model):
    try:
        weakref.ref(model)
    except TypeError:
        return [(f"load_model returned a {type(model).__name__}, which cannot be weakly referenced: RunInference's "
                 "shared model cache fails on it (TypeError in DoFn.setup); return an object, not a tuple/list/dict")]
    return []


def results_stable(subject):
    spec = subject.spec
    handler, model, failed = _loaded(subject, "handler_results_stable")
    if failed:
        return failed
    sizes = [spec.max_batch, 1, spec.max_batch][:STABLE_CALLS]
    calls, failures = [], []
    for i, n in enumerate(sizes):
        try:
            calls.append((n, *_call(subject, handler, model, batch_of(spec, n, seed=100 + i))))
        except Exception as err:  # noqa: BLE001 - the handler's own error type varies
            failures.append(f"call {i + 1} (batch of {n}) raised {type(err).__name__}: {err}")
    for i, (n, results, snapshot) in enumerate(calls[:-1]):
        for j, (result, before) in enumerate(zip(results, snapshot)):
            after = _inference(subject, result)
            if isinstance(before, str) or not _same(before, after):
                failures.append(f"result {j} of call {i + 1} (batch of {n}) changed after {len(calls) - i - 1} later "
                                "call(s): run_inference returned views into a buffer it reuses")
                break
    return _result("handler_results_stable", subject, failures, batch_sizes=sizes)


def _same(a, b):
    return not isinstance(b, str) and a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True)
                                                                    for k in a)


def batch_extremes(subject):
    spec = subject.spec
    handler, model, failed = _loaded(subject, "handler_batch_extremes")
    if failed:
        return failed
    failures = []
    for n in sorted({1, spec.max_batch}):
        batch = batch_of(spec, n, seed=200 + n)
        try:
            results, inferences = _call(subject, handler, model, batch)
        except Exception as err:  # noqa: BLE001 - the handler's own error type varies
            failures.append(f"a batch of {n} raised {type(err).__name__}: {err}")
            continue
        failures += _batch_problems(subject, n, batch, results, inferences)
    return _result("handler_batch_extremes", subject, failures, batch_sizes=sorted({1, spec.max_batch}))


def _batch_problems(subject, n, batch, results, inferences):
    if len(results) != n:
        return [f"a batch of {n} returned {len(results)} result(s)"]
    problems = []
    refs = subject.references(batch)
    pre = handler_fns(subject.make(1, subject.spec.max_batch))[0]
    for i, (element, result, inference, ref) in enumerate(zip(batch, results, inferences, refs)):
        example, given = getattr(result, "example", None), apply_fns(pre, element)
        if example is not None and digest(example) != digest(given) and same_values(given, example):
            problems.append(f"batch of {n}: contract breach: result {i}'s example is element {i} converted "
                            f"({describe(given)} came back as {describe(example)}), not the element itself")
        elif example is None or digest(example) != digest(given):
            problems.append(f"batch of {n}: result {i}'s example is not element {i}")
        elif isinstance(inference, str):
            problems.append(f"batch of {n}: result {i}: {inference}")
        else:
            problem = compare_element(subject, ref, inference)
            if problem:
                problems.append(f"batch of {n}: result {i}: {problem}")
    return problems


def num_bytes(subject):
    spec = subject.spec
    handler = subject.make(1, spec.max_batch)
    pre = handler_fns(handler)[0]
    owned = [apply_fns(pre, e) for e in batch_of(spec, spec.max_batch, seed=300)]
    expected, rule = expected_num_bytes(handler, owned)
    failures, reported = [], {}
    for form, batch in (("arrays owning their data", owned),
                        ("arrays as Beam's coder delivers them", [beam_decoded(e) for e in owned])):
        try:
            value = handler.get_num_bytes(batch)
        except Exception as err:  # noqa: BLE001 - the handler's own error type varies
            failures.append(f"get_num_bytes raised {type(err).__name__}: {err} ({form})")
            continue
        reported[form] = value
        if not isinstance(value, (int, np.integer)) or value != expected:
            failures.append(f"get_num_bytes({spec.max_batch} elements, {form}) = {value!r}, not the {expected} bytes "
                            f"of {rule}")
    return _result("handler_num_bytes", subject, failures, payload_bytes=expected, rule=rule, reported=reported)


def batch_kwargs(subject):
    import apache_beam as beam

    m = subject.spec.max_batch
    failures, seen = [], {}
    for low, high in sorted({(1, m), (m, m), (1, 1), (max(1, m // 2), m)}):
        kwargs = dict(subject.make(low, high).batch_elements_kwargs())
        seen[f"{low},{high}"] = {k: repr(v) for k, v in kwargs.items()}
        got = (kwargs.get("min_batch_size", 1), kwargs.get("max_batch_size"))
        if got != (low, high):
            failures.append(f"factory(min_batch_size={low}, max_batch_size={high}).batch_elements_kwargs() gives "
                            f"min/max {got[0]}/{got[1]}")
        try:
            beam.BatchElements(**kwargs)
        except Exception as err:  # noqa: BLE001 - BatchElements' complaint names the bad kwarg
            failures.append(f"beam.BatchElements(**batch_elements_kwargs()) for ({low}, {high}) raised "
                            f"{type(err).__name__}: {err}")
    return _result("handler_batch_kwargs", subject, failures, batch_elements_kwargs=seen)


def metrics_namespace(subject):
    namespace = subject.make(1, subject.spec.max_batch).get_metrics_namespace()
    failures = [] if isinstance(namespace, str) and namespace else [
        f"get_metrics_namespace() returned {namespace!r}, not a non-empty string"]
    return _result("handler_metrics_namespace", subject, failures, namespace=repr(namespace))


DIRECT_CHECKS = {"handler_load_model": load_model, "handler_results_stable": results_stable, "handler_batch_extremes": batch_extremes,
                 "handler_num_bytes": num_bytes, "handler_batch_kwargs": batch_kwargs,
                 "handler_metrics_namespace": metrics_namespace}
