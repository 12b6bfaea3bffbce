"""The two-tier adapter registry, without a model: slots, host memory, LRU, pinning, failures."""

import pytest

from llmop.engine.lora.registry import AdapterConflict, AdapterRegistry, AdapterState


class Tiers:
    """Records what the registry does to the two tiers (the real slot writer is tested elsewhere)."""

    def __init__(self, fail=()):
        self.slots, self.reads, self.fail = {}, [], set(fail)

    def load(self, name, source):
        self.reads.append(name)
        if name in self.fail:
            raise ValueError(f"cannot read {source}")
        return f"weights-of-{name}"

    def write(self, slot, adapter):
        self.slots[slot] = adapter


def make(max_slots=2, max_host=3, fail=()):
    t = Tiers(fail)
    return AdapterRegistry(max_slots, max_host, t.load, t.write), t


def resident(reg):
    return {i.name for i in reg.infos() if i.state is AdapterState.RESIDENT}


def test_lru_eviction_between_slots_never_takes_an_adapter_in_use():
    reg, t = make(max_slots=2, max_host=0)
    for n in "abc":
        reg.add(n, f"/{n}")
    assert reg.ensure_resident(["a"], in_use=set()) == {"a": 0}
    assert reg.ensure_resident(["b"], in_use={"a"}) == {"b": 1}
    reg.ensure_resident(["a"], in_use=set())  # a is now the most recently used
    assert reg.ensure_resident(["c"], in_use=set()) == {"c": 1}  # b was the LRU
    assert resident(reg) == {"a", "c"} and t.slots == {0: "weights-of-a", 1: "weights-of-c"}
    reg.ensure_resident(["b"], in_use={"a"})  # a in use: c goes even though a is older
    assert resident(reg) == {"a", "b"}
    assert (reg.num_slot_loads, reg.num_slot_evictions) == (4, 2)  # a, b, then c over b, b over c
    with pytest.raises(AdapterConflict):
        reg.ensure_resident(["c"], in_use={"a", "b"})


def test_pinned_adapters_take_a_slot_at_load_and_keep_it():
    reg, _ = make(max_slots=2, max_host=0)
    reg.add("p", "/p", pinned=True)
    assert resident(reg) == {"p"} and reg.pinned_resident() == {"p"}
    reg.add("a", "/a")
    reg.add("b", "/b")
    reg.ensure_resident(["a"], in_use=set())
    reg.ensure_resident(["b"], in_use=set())
    assert resident(reg) == {"p", "b"}
    reg.add("q", "/q", pinned=True)
    with pytest.raises(AdapterConflict, match="pinned"):
        reg.add("r", "/r", pinned=True)


def test_host_tier_evicts_to_disk_and_reads_back_on_demand():
    reg, t = make(max_slots=1, max_host=2)
    for n in "abc":
        reg.add(n, f"/{n}")
    assert reg.state("a") is AdapterState.DISK  # the LRU host copy went
    assert reg.host("a") is None and reg.host("c") == "weights-of-c"
    assert reg.ensure_resident(["a"], in_use=set()) == {"a": 0}  # read from disk again
    assert t.reads == ["a", "b", "c", "a"] and reg.num_disk_loads == 1
    assert sum(i.state is not AdapterState.DISK for i in reg.infos()) == 2


def test_a_failed_read_marks_only_that_adapter():
    reg, _ = make(fail={"bad"})
    reg.add("good", "/good")
    with pytest.raises(ValueError):
        reg.add("bad", "/bad")
    info = reg.info("bad")
    assert info.state is AdapterState.FAILED and "cannot read /bad" in info.error
    assert reg.ensure_resident(["good"], in_use=set()) == {"good": 0}
    assert not reg.ensure_host("bad")
    reg.remove("bad")
    assert "bad" not in reg


def test_remove_is_refused_while_in_use_and_frees_the_slot():
    reg, t = make()
    reg.add("a", "/a")
    reg.ensure_resident(["a"], in_use=set())
    with pytest.raises(AdapterConflict, match="in use"):
        reg.remove("a", in_use={"a"})
    reg.remove("a", in_use=set())
    assert reg.infos() == []
    reg.add("b", "/b")
    assert reg.ensure_resident(["b"], in_use=set()) == {"b": 0} and t.slots == {0: "weights-of-b"}
    with pytest.raises(AdapterConflict, match="exists"):
        reg.add("b", "/b")


def test_every_registration_gets_a_new_generation_and_a_reload_keeps_it():
    """The prefix cache keys by the generation: a name loaded again is another adapter, a read
    back from disk is the same one."""
    reg, _ = make(max_slots=1, max_host=1)
    reg.add("a", "/a")
    first = reg.info("a").generation
    reg.add("b", "/b")  # host tier of 1: a goes to disk
    assert reg.state("a") is AdapterState.DISK
    reg.ensure_resident(["a"], in_use=set())
    assert reg.info("a").generation == first
    reg.remove("a")
    reg.add("a", "/other-a")
    assert reg.info("a").generation not in (first, reg.info("b").generation)
