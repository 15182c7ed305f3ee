"""Regenerate ``trt_operators.json`` from onnx-tensorrt's ``docs/operators.md`` (its "Operator Support Matrix").

    git -C <onnx-tensorrt clone> show <commit>:docs/operators.md > operators.md
    python -m paritygate.backend.onnx.lint.data.make_trt_operators operators.md <commit> <tag> > trt_operators.json

Each row ``| Op | Y/N | TYPES | restrictions |`` becomes ``"Op": {"supported": bool, "types": [...],
"restrictions": "..."}``; the header line "TensorRT X supports operators in the inclusive range of opset A to
opset B" gives the version and the opset range."""

import json
import re
import sys


def parse(text):
    header = re.search(r"TensorRT ([0-9.]+) supports operators in the inclusive range of opset (\d+) to opset (\d+)",
                       text)
    if header is None:
        raise ValueError("operators.md: no 'TensorRT X supports operators in the inclusive range of opset A to "
                         "opset B' line")
    ops = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[1] not in ("Y", "N"):
            continue
        types = [t.strip().replace("INF64", "INT64") for t in cells[2].split(",") if t.strip()] if len(cells) > 2 else []
        ops[cells[0]] = {"supported": cells[1] == "Y", "types": types,
                         "restrictions": cells[3] if len(cells) > 3 else ""}
    return {"tensorrt": header.group(1), "opset": [int(header.group(2)), int(header.group(3))], "operators": ops}


def main(path, commit, tag):
    with open(path, encoding="utf-8") as fh:
        table = parse(fh.read())
    table = {"source": {"repo": "onnx/onnx-tensorrt", "path": "docs/operators.md", "commit": commit, "tag": tag},
             **table}
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
