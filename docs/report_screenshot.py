"""Make docs/report.png, the README's picture of a failing report, from real runs (no edited JSON):

    PYTHONPATH=plugins:. .venv/bin/python docs/report_screenshot.py docs/report.png

Three toy models (y = 5x, z = 2x as a TF SavedModel; ONNX candidates made in code) at fp32 and fp16 run through
conformance/test_parity.py twice: first with correct candidates (the baseline), then with two of them broken
(`regressed`: y = 5.01x; `nan`: z = 2x + 0 * log(x), NaN for x <= 0) and --parity-baseline pointing at the
first report. The second report's first screen at 1400 x 900 is saved, quantized to 256 colours.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paritygate.report.browser import screenshot
from tests.conftest import make_onnx, save_toy_model, scale, write_config


def nan_for_nonpositive(out, k):
    """out = k * x + 0 * log(x): NaN (or -inf * 0) wherever x <= 0."""
    import onnx

    h = onnx.helper
    zero = h.make_tensor(f"{out}_0", onnx.TensorProto.FLOAT, [], [0.0])
    return [*scale(f"{out}_lin", k),
            h.make_node("Log", ["x"], [f"{out}_log"], name=f"{out}_log"),
            h.make_node("Constant", [], [f"{out}_zero"], name=f"{out}_zero", value=zero),
            h.make_node("Mul", [f"{out}_log", f"{out}_zero"], [f"{out}_nan"], name=f"{out}_nanmul"),
            h.make_node("Add", [f"{out}_lin", f"{out}_nan"], [out], name=f"{out}_add")]


def run(folder, reference, broken, *args):
    candidates = {"scale": (scale("y", 5.0), scale("z", 2.0)),
                  "regressed": (scale("y", 5.01 if broken else 5.0), scale("z", 2.0)),
                  "nan": (scale("y", 5.0), nan_for_nonpositive("z", 2.0) if broken else scale("z", 2.0))}
    models = []
    for name, nodes in candidates.items():
        path = make_onnx(folder / f"{name}.onnx", *nodes)
        models.append({"name": name, "reference": str(reference), "onnx": path.name, "precisions": ["fp32", "fp16"],
                       "max_batch": 4, "inputs": {"x": {"shape": [-1, 1], "dtype": "float32",
                                                        "range": [-1.0, 1.0]}}})
    config = write_config(folder, {"models": models})
    report = folder / "parity-report"
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "conformance" / "test_parity.py"), "-p", "no:xdist",
                    "-p", "no:cacheprovider", "-q", f"--parity-config={config}", f"--parity-report={report}",
                    "--parity-localize=off", *args], cwd=folder, check=False)
    return report


def main(out):
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="paritygate-screenshot-") as tmp:
        tmp = Path(tmp)
        reference = save_toy_model(tmp / "saved_model")
        (tmp / "good").mkdir()
        (tmp / "bad").mkdir()
        baseline = run(tmp / "good", reference, broken=False) / "parity-report.json"
        report = run(tmp / "bad", reference, True, f"--parity-baseline={baseline}")
        png = screenshot(report / "parity-report.html", tmp / "shot.png")
        Image.open(png).convert("RGB").quantize(256).save(out, optimize=True)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(REPO / "docs" / "report.png"))
