"""MTCNN's PNet exported and converted as a team would (mtcnn 1.0.0 ships only Keras code and weights):

    python -m tests.thirdparty.export_pnet MTCNN_DIR OUT_DIR

MTCNN_DIR holds the package's files (tests/thirdparty/install: .thirdparty/mtcnn-1.0.0). The model is built as
mtcnn/stages/stage_pnet.py builds it (PNet(), build(), set_weights(load_weights("pnet.lz4"))), saved with
``tf.saved_model.save`` under a serving signature with dynamic N, H, W (OUT_DIR/pnet), then converted by tf2onnx's
command line, the team's own conversion, which keeps those dims dynamic (OUT_DIR/pnet.onnx). Outputs are named
as MTCNN reads them: ``bbox_reg`` [N, h, w, 4] and ``face_prob`` [N, h, w, 2] (softmax: not face, face).
"""

import subprocess
import sys
from pathlib import Path

OPSET = 17  # tf2onnx 1.17's default opset


def export(mtcnn_dir, out):
    import tensorflow as tf

    sys.path.insert(0, str(mtcnn_dir))
    from mtcnn.network.pnet import PNet
    from mtcnn.utils.tensorflow import load_weights

    model = PNet()
    model.build()
    model.set_weights(load_weights(str(Path(mtcnn_dir) / "mtcnn" / "assets" / "weights" / "pnet.lz4")))
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="image")])
    def serve(image):
        bbox_reg, face_prob = model(image)
        return {"bbox_reg": bbox_reg, "face_prob": face_prob}

    module.serve = serve
    tf.saved_model.save(module, str(out / "pnet"), signatures={"serving_default": serve})


def convert(out):
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(out / "pnet"), "--output",
                    str(out / "pnet.onnx"), "--opset", str(OPSET)], check=True, capture_output=True, text=True)


def main(mtcnn_dir, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    export(Path(mtcnn_dir), out)
    convert(out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
