"""``paritygate shadow``: the gate as one Beam pipeline over a team's recorded traffic (issues 31, 39).

    read.py       TFRecord / npz / Parquet files -> keyed elements (input name -> array); dead letters by category,
                  records outside the declared range; the checks' own file, size, type and finiteness rules
    tfrecord.py   TFRecord frames read with every CRC checked; a corrupt record skipped, the framing resynced
    synthetic.py  recorded-like traffic made from a bundled input set (tests, the benchmark, a first try)
    example.py    one example: the checks' own comparator and task metric (judge.parity.judge_outputs)
    stats.py      bounded-memory, mergeable statistics: counts, non-finite, error quantiles, flips per class and
                  slice, detections, worst K (no Beam import: the report merges them)
    combiners.py  the Beam CombineFns over them; the key check; the out-of-range tally
    gate.py       Clopper-Pearson intervals, exact p-values, Holm's correction, the minimum count
    rates.py      a rate gated overall, per class and per slice: fail / pass / inconclusive
    pipeline.py   read -> RunInference (reference and each candidate) -> judge and fold per bundle -> combine
    results.py    the combined statistics as CheckResults for the report (shadow_top1, _detection, _elementwise,
                  _judged); data.py the model-level shadow_data check and its findings
    merge.py      shadow checks of several reports as one: counts add, gated once
"""
