"""ONNX: the candidate artifacts and what is done with them, a folder per idea (each ``__init__`` says what it holds).

- ``graph/``: walks and rewrites that see through subgraphs, fresh names, the element types the rewrites name;
- ``artifacts/``: the ONNX artifact per precision (fp32 from tf2onnx, fp16, int8), validated and cached, and the
  checks of a team's own fp16 / int8 file;
- ``strict/``: strict numerics, an fp16 / int8 artifact computed as a strongly typed engine computes it
  (``strict.loader.computed``, the one entry point);
- ``diagnosis/``: where precision breaks in a failing artifact and which nodes to keep to repair it;
- ``lint/``: what an artifact holds, read without an engine: TensorRT parser lint and precision coverage.
"""
