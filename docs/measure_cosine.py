"""Lowest cosine per model, precision and input kind where the cosine budget applies (docs/cosine.md)."""
import numpy as np

from paritygate.backend.runtimes import candidate_runner, reference_runner
from paritygate.comparator.compare import compare_outputs
from paritygate.context import RunOptions
from paritygate.inputs import goldens, strategies

options = RunOptions()
rng = np.random.default_rng(1)
for spec in options.models:
    ref = reference_runner(options.context, spec)
    g = goldens.load_golden(spec)
    pool = {k: np.concatenate([g.inputs[k], np.load(spec.calibration)[k]]) for k in spec.inputs}
    for p in ("fp32", "fp16", "int8"):
        c = candidate_runner(options.context, spec, p)
        res = {"noise": [], "real": [], "perturbed": []}
        for trial in range(300):
            b = int(rng.integers(1, 9))
            kind = ["noise", "real", "perturbed"][trial % 3]
            if kind == "noise":
                pat = strategies.FLOAT_PATTERNS if spec.name != "bert" else strategies.INT_PATTERNS
                pat = pat[int(rng.integers(len(pat)))]
                f = {k: strategies._fill(pat, t, t.with_batch(b), rng) for k, t in spec.inputs.items()}
            else:
                idx = rng.integers(0, len(next(iter(pool.values()))), b)
                f = {k: pool[k][idx].copy() for k in spec.inputs}
                if kind == "perturbed":
                    for k, t in spec.inputs.items():
                        if t.dtype.kind == "f":
                            f[k] = np.clip(f[k] + rng.normal(0, 0.05, f[k].shape), *t.range).astype(t.dtype)
                        else:
                            m = rng.random(f[k].shape) < 0.1
                            f[k] = np.where(m, rng.integers(t.range[0], t.range[1] + 1, f[k].shape), f[k]).astype(t.dtype)
            r, cc = ref.infer(f), c.infer(f)
            for o in compare_outputs(spec, p, r, cc):
                atol = o.tolerance["atol"]
                app = o.cosine_enforced
                if app:
                    res[kind].append((o.cosine, o.output, b, o.max_abs, o.passed))
        for kind, v in res.items():
            v.sort()
            print(spec.name, p, kind, len(v), [(round(x[0], 4), x[1], x[2], round(x[3], 3), x[4]) for x in v[:4]])
