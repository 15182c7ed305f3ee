"""paritygate.backend.onnx.diagnosis.repair: the search's pruning prefers plans that keep multiply-accumulates in the
stated precision (the heaviest members are tried for removal first)."""

from paritygate.backend.onnx.diagnosis import repair


def test_prune_drops_the_heaviest_member_first():
    """Both {a, mac} and {a, b} pass; without weights the last added (b) goes, with them the MAC node does."""
    def passes(nodes):
        return "a" in nodes and ("mac" in nodes or "b" in nodes)

    assert repair._prune(repair._Search(passes, 24), ["a", "mac", "b"], "a") == ["a", "mac"]
    weight = {"a": 0, "mac": 1, "b": 0}.get
    assert repair._prune(repair._Search(passes, 24), ["a", "mac", "b"], "a", weight) == ["a", "b"]


def test_search_passes_its_weight_to_the_prune():
    trail = iter(["a", "mac", "b"])

    def passes(nodes):
        return {"a", "mac", "b"} <= set(nodes) or set(nodes) == {"a", "b"}

    plan = repair.search(lambda nodes: next(trail), passes, ["a", "mac", "b"], lambda name, nodes: [],
                         weight={"a": 0, "mac": 1, "b": 0}.get)
    assert plan.verified and plan.nodes == ["a", "b"]


def test_no_rebuild_starts_past_the_deadline():
    """The run's localization budget (judge.localization_budget): a deadline already past stops the search before
    its first rebuild, unverified; without one the same search finds its plan."""
    import time

    tried = []

    def passes(nodes):
        tried.append(list(nodes))
        return set(nodes) == {"a", "b"}

    def ranked(nodes):
        return ["b" if nodes else "a"]

    late = repair.search(ranked, passes, ["a", "b"], lambda name, nodes: [], deadline=time.monotonic() - 1)
    assert not late.verified and late.trials == [] and tried == []
    plan = repair.search(ranked, passes, ["a", "b"], lambda name, nodes: [], deadline=time.monotonic() + 60)
    assert plan.verified and plan.nodes == ["a", "b"]


def test_no_rebuild_starts_that_the_longest_so_far_would_carry_past_the_deadline():
    """BERT-base's int8 localization was allowed 100 s and took 122.6 s: a 20-s rebuild started near the end. After
    a 0.3-s rebuild, a deadline 0.5 s away leaves room for no second one."""
    import time

    tried = []

    def passes(nodes):
        tried.append(list(nodes))
        time.sleep(0.3)
        return False

    plan = repair.search(lambda nodes: ["a", "b", "c"], passes, ["a", "b", "c"], lambda name, nodes: [],
                         deadline=time.monotonic() + 0.5)
    assert not plan.verified and len(tried) == 1, tried
