"""``paritygate shadow``: the gate as one Beam pipeline over a team's recorded traffic (issue 31).

    read.py       TFRecord / npz / Parquet files -> keyed elements (input name -> array) + a dead-letter output
    synthetic.py  recorded-like traffic made from a bundled input set (tests, the benchmark, a first try)
    example.py    one example: the checks' own comparator and task metric (judge.parity.judge_outputs)
    combiners.py  bounded-memory Beam combiners: counts, non-finite, error quantiles, flips, slices, worst K
    gate.py       Clopper-Pearson intervals and the pass / fail / inconclusive rule on them
    pipeline.py   read -> RunInference (reference and each candidate) -> join by key -> judge -> combine
    results.py    the combined statistics as CheckResults for the report
"""
