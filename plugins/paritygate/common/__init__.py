"""The ground floor: what every other part of the suite may use, importing nothing of the suite's own.

    commands.py   every command the suite prints for a person (rerun a check, replay, regenerate goldens)
    timeline.py   where a run's time went (conversion, reference, candidate, checks), per process
    numerics.py   the precisions and what each ``--parity-numerics`` mode computes, by name
    digest.py     the suite's one content digest of arrays
    memo.py       what a run computes once: each cache declared by its owner module, behind one typed key

tests/test_layout.py holds the floors: a module imports only from its own floor or the ones below.
"""
