"""The names the floors above share: the precisions a config may list, and what each ``--parity-numerics`` mode
computes (the strict rewrite itself is paritygate.backend.onnx.strict.rewrite; docs/numerics.md)."""

PRECISIONS = ("fp32", "fp16", "int8")
DESCRIPTION = {
    "strict": "strict: every float16 tensor rounded to FP16 where it is produced, each op computed from FP16 "
              "values in FP32; Q/DQ run as fake quantization in FP32, never as ONNX Runtime's integer kernels "
              "(ONNX Runtime CPU; the same verdicts on any instruction set; docs/numerics.md)",
    "ort": "ort: ONNX Runtime CPU's own numerics (most float16-typed ops run in FP32 without the FP16 rounding "
           "between them; Q/DQ fused into integer kernels chosen by the CPU's instruction set: cpu_isa in the "
           "environment; not what a strongly typed engine computes)",
}


def describe(mode):
    """One line on what ``--parity-numerics`` mode ``mode`` computes."""
    return DESCRIPTION.get(mode, f"{mode}: the candidate runtime's own numerics")
