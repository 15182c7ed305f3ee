"""Export the model under test as a SavedModel in model/ (replace this file with your own export step).

This template's model is a small classifier with fixed weights: 8 features in [-1, 1] -> 3 class
probabilities. Your export writes your model; parity.toml says what it takes and returns.
"""

from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent


def main(out=HERE / "model"):
    rng = np.random.default_rng(0)
    module = tf.Module()
    module.w = tf.Variable(rng.normal(size=(8, 3)).astype("float32"))
    module.b = tf.Variable(rng.normal(scale=0.1, size=(3,)).astype("float32"))

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="features")])
    def serve(features):
        return {"probs": tf.nn.softmax(tf.matmul(features, module.w) + module.b)}

    module.serve = serve
    tf.saved_model.save(module, str(out), signatures={"serving_default": serve})
    print(f"exported {out}")


if __name__ == "__main__":
    main()
