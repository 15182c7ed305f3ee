"""A real candidate that flips about 1 in FLIP_EVERY top-1 decisions: the suite's ONNX Runtime handler over the
model's fp32 ONNX, whose result swaps the two highest class scores for every input whose sha256 falls in one
residue class modulo FLIP_EVERY (deterministic per input, independent of batching and workers)."""

import hashlib

import numpy as np

from paritygate.beam import serving

FLIP_EVERY = 200


def flipped(example):
    return int(hashlib.sha256(np.ascontiguousarray(example).tobytes()).hexdigest()[:8], 16) % FLIP_EVERY == 0


class FlippingHandler(serving.OnnxRuntimeHandler):
    def run_inference(self, batch, model, inference_args=None):
        results = super().run_inference(batch, model, inference_args)
        for result in results:
            if flipped(result.example):
                for scores in result.inference.values():
                    top2 = np.argsort(scores)[-2:]
                    scores[top2] = scores[top2[::-1]]
        return results


def flipper(min_batch_size, max_batch_size, model, reference_outputs=None):
    from paritygate.backend.onnx.artifacts.loader import onnx_artifact

    path = onnx_artifact(model, "fp32")
    return FlippingHandler(path, serving.bindings_for(model, path), model.max_batch,
                           serving.output_names_for(model, path, reference_outputs), min_batch_size=min_batch_size,
                           max_batch_size=max_batch_size)


flipper.paritygate_takes_model = True
