"""Dependency-token insertion (compiler/passes/tokens.py)."""

import random
import re

import pytest
from vtakit.compiler.backends.vta.lowering.tokens import Record, insert_tokens
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Module, Store
from vtakit.isa.image import ProgramBuilder

from vtakit import sim
from vtakit.errors import CompileError, DeadlockError

CFG = HwConfig.preset("pynq")
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")

# slots: A, B in the input buffer, C in the accumulator
A, B, C = ("inp", 0), ("inp", 1), ("acc", 0)


# No-op instructions of each module (x_size 0 LOADs and STOREs, empty micro-op ranges).
def load(reads=(), writes=()):          # load module
    return Record(Load(MemId.INP, 0, 0, 0, 0, 0), frozenset(reads), frozenset(writes))


def gemm(reads=(), writes=()):          # compute module
    return Record(Gemm(0, 0), frozenset(reads), frozenset(writes))


def store(reads=(), writes=()):         # store module
    return Record(Store(MemId.OUT, 0, 0, 0, 0, 0), frozenset(reads), frozenset(writes))


def flags(records):
    return [{f for f in FLAGS if getattr(r.insn, f)} for r in records]


def test_modules_of_the_helpers():
    assert load().module == Module.LOAD
    assert Record(Load(MemId.WGT, 0, 0, 0, 0, 0)).module == Module.LOAD
    assert Record(Load(MemId.UOP, 0, 0, 0, 0, 0)).module == Module.COMPUTE
    assert Record(Load(MemId.ACC, 0, 0, 0, 0, 0)).module == Module.COMPUTE
    assert gemm().module == Record(Alu(AluOp.ADD, 0, 0)).module == Module.COMPUTE
    assert store().module == Module.STORE


def test_raw_load_to_compute():
    out = insert_tokens([load(writes=[A]), gemm(reads=[A])])
    # FINISH waits for load 0, which the GEMM already waited for: no second token
    assert flags(out) == [{"push_next"}, {"pop_prev"}, set()]
    assert isinstance(out[-1].insn, Finish)


def test_waw_load_then_compute_write():
    out = insert_tokens([load(writes=[A]), gemm(writes=[A])])
    assert flags(out) == [{"push_next"}, {"pop_prev"}, set()]


def test_war_compute_to_load():
    # the load overwrites a slot the GEMM reads: the GEMM pushes back, the load pops from next;
    # then FINISH waits for that last load (push_next / pop_prev)
    out = insert_tokens([gemm(reads=[A]), load(writes=[A])])
    assert flags(out) == [{"push_prev"}, {"pop_next", "push_next"}, {"pop_prev"}]


def test_raw_compute_to_store():
    # FINISH waits for the last store: push_prev on the store, pop_next on FINISH
    out = insert_tokens([gemm(writes=[C]), store(reads=[C])])
    assert flags(out) == [{"push_next"}, {"pop_prev", "push_prev"}, {"pop_next"}]


def test_war_store_to_compute():
    out = insert_tokens([store(reads=[C]), gemm(writes=[C])])
    assert flags(out) == [{"push_prev"}, {"pop_next"}, set()]


def test_same_module_needs_no_token():
    out = insert_tokens([load(writes=[A]), load(writes=[A]), gemm(writes=[C]), gemm(reads=[C])])
    # only FINISH's wait for the last load
    assert flags(out) == [set(), {"push_next"}, set(), set(), {"pop_prev"}]


def test_implied_dependency_adds_no_token():
    # the GEMM at 2 waited for load 1, so load 0 (earlier, same module) is done when GEMM 3 runs
    out = insert_tokens([load(writes=[A]), load(writes=[B]), gemm(reads=[B]), gemm(reads=[A])])
    assert flags(out) == [set(), {"push_next"}, {"pop_prev"}, set(), set()]


def test_later_dependency_gets_a_new_token():
    # the reverse order: GEMM 2 waits for load 0, GEMM 3 needs load 1, which is later: a second token
    out = insert_tokens([load(writes=[A]), load(writes=[B]), gemm(reads=[A]), gemm(reads=[B])])
    assert flags(out) == [{"push_next"}, {"push_next"}, {"pop_prev"}, {"pop_prev"}, set()]


def test_two_producers_of_one_module_pop_once():
    out = insert_tokens([load(writes=[A]), load(writes=[B]), gemm(reads=[A, B])])
    assert flags(out) == [set(), {"push_next"}, {"pop_prev"}, set()]


def test_readers_of_both_kinds_before_a_write():
    # C is read by GEMM 1 (same module: nothing) and store 2; GEMM 3's write waits for the store
    out = insert_tokens([gemm(writes=[C]), gemm(reads=[C]), store(reads=[C]), gemm(writes=[C])])
    assert flags(out) == [{"push_next"}, set(), {"pop_prev", "push_prev"}, {"pop_next"}, set()]


def test_one_instruction_waits_on_both_neighbours():
    # GEMM 2 reads A (written by load 0) and writes C (read by store 1)
    out = insert_tokens([load(writes=[A]), store(reads=[C]), gemm(reads=[A], writes=[C])])
    assert flags(out) == [{"push_next"}, {"push_prev"}, {"pop_prev", "pop_next"}, set()]


def test_finish_waits_for_last_load_and_store():
    out = insert_tokens([load(writes=[A]), store(reads=[C]), load(writes=[B]), store(reads=[C])])
    # no dependencies among them; FINISH waits for load 2 and store 3 only
    assert flags(out) == [set(), set(), {"push_next"}, {"push_prev"}, {"pop_prev", "pop_next"}]
    assert len(out) == 5 and isinstance(out[-1].insn, Finish)


def test_finish_alone():
    out = insert_tokens([gemm(writes=[C])])
    assert flags(out) == [set(), set()]
    out = insert_tokens([])
    assert len(out) == 1 and isinstance(out[0].insn, Finish) and flags(out) == [set()]


def test_records_keep_their_data():
    rec = Record(Load(MemId.INP, 3, 7, 1, 2, 2), frozenset(), frozenset([A]), reloc="data")
    out = insert_tokens([rec, gemm(reads=[A])])
    assert out[0].reloc == "data" and out[0].writes == frozenset([A])
    assert out[0].insn == Load(MemId.INP, 3, 7, 1, 2, 2, push_next=True)


def test_load_store_dependency_raises():
    with pytest.raises(CompileError, match=re.escape("instruction 1 (STORE.OUT) depends on the load module, "
                                                     "which is not its neighbour")):
        insert_tokens([load(writes=[C]), store(reads=[C])])
    with pytest.raises(CompileError, match=re.escape("instruction 1 (LOAD.INP) depends on the store module")):
        insert_tokens([store(reads=[A]), load(writes=[A])])


# ------------------------------------------------------------------ property test
LOAD_SLOTS = [("inp", 0), ("inp", 1), ("wgt", 0), ("wgt", 1)]
ACC_SLOTS = [("acc", 0), ("acc", 1), ("acc", 2)]
COMPUTE_INSNS = [lambda: Gemm(0, 0), lambda: Alu(AluOp.ADD, 0, 0), lambda: Load(MemId.UOP, 0, 0, 0, 0, 0),
                 lambda: Load(MemId.ACC, 0, 0, 0, 0, 0)]


def random_records(rng, n):
    """Loads touch input slots, stores accumulator slots, compute both: no load <-> store conflicts."""
    def some(slots, k):
        return frozenset(rng.sample(slots, rng.randint(0, k)))

    out = []
    for _ in range(n):
        m = rng.choice(["load", "compute", "compute", "store"])
        if m == "load":
            out.append(Record(Load(rng.choice([MemId.INP, MemId.WGT]), 0, 0, 0, 0, 0),
                              some(LOAD_SLOTS, 1), some(LOAD_SLOTS, 2)))
        elif m == "store":
            out.append(Record(Store(MemId.OUT, 0, 0, 0, 0, 0), some(ACC_SLOTS, 2), frozenset()))
        else:
            out.append(Record(rng.choice(COMPUTE_INSNS)(), some(LOAD_SLOTS + ACC_SLOTS, 3),
                              some(ACC_SLOTS + LOAD_SLOTS[:1], 2)))
    return out


DIRECTIONS = {  # (pusher module, flag) -> (popper module, flag)
    "load->compute": ((Module.LOAD, "push_next"), (Module.COMPUTE, "pop_prev")),
    "compute->load": ((Module.COMPUTE, "push_prev"), (Module.LOAD, "pop_next")),
    "compute->store": ((Module.COMPUTE, "push_next"), (Module.STORE, "pop_prev")),
    "store->compute": ((Module.STORE, "push_prev"), (Module.COMPUTE, "pop_next")),
}


def happens_before(out):
    """reach[i] = instructions that have completed before i starts (program order within a module,
    plus token edges with FIFO matching of the k-th pop to the k-th push)."""
    n = len(out)
    preds = [set() for _ in range(n)]
    last = {}
    for i, r in enumerate(out):
        if r.module in last:
            preds[i].add(last[r.module])
        last[r.module] = i
    for (pm, pf), (cm, cf) in DIRECTIONS.values():
        pushes = [i for i, r in enumerate(out) if r.module == pm and getattr(r.insn, pf)]
        pops = [i for i, r in enumerate(out) if r.module == cm and getattr(r.insn, cf)]
        for p, q in zip(pushes, pops):
            assert p < q, "a pop matched to a later push"
            preds[q].add(p)
    reach = [set() for _ in range(n)]
    for i in range(n):                    # every edge goes forward in program order
        for p in preds[i]:
            reach[i] |= reach[p] | {p}
    return reach


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences(seed):
    rng = random.Random(seed)
    records = random_records(rng, rng.randint(1, 40))
    out = insert_tokens(records)
    assert len(out) == len(records) + 1 and isinstance(out[-1].insn, Finish)
    # every token pushed is popped, per direction
    for name, ((pm, pf), (cm, cf)) in DIRECTIONS.items():
        pushes = sum(1 for r in out if r.module == pm and getattr(r.insn, pf))
        pops = sum(1 for r in out if r.module == cm and getattr(r.insn, cf))
        assert pushes == pops, name
    # no flag toward a neighbour that does not exist
    assert not any(r.insn.pop_prev or r.insn.push_prev for r in out if r.module == Module.LOAD)
    assert not any(r.insn.pop_next or r.insn.push_next for r in out if r.module == Module.STORE)
    # every conflicting pair of accesses is ordered, and FINISH comes after everything
    reach = happens_before(out)
    for i, ri in enumerate(out[:-1]):
        for j in range(i):
            rj = out[j]
            if (rj.writes & (ri.reads | ri.writes)) or (rj.reads & ri.writes):
                assert j in reach[i], (j, i)
    assert reach[-1] == set(range(len(out) - 1))
    # the program runs to FINISH on both models (a deadlock raises)
    b = ProgramBuilder(CFG)
    b.emit(*[r.insn for r in out])
    image = b.build()
    for model in ("functional", "cycle"):
        stats, _ = sim.run_image(image, model=model)
        assert stats.insns == len(out)


def _many_in_flight(n: int) -> list[Record]:
    """n compute->store tokens in flight, with enough compute between to fill its command queue."""
    records = [gemm(writes=[("acc", i)]) for i in range(n)]
    records += [gemm() for _ in range(CFG.cmd_queue_depth + 88)]
    return records + [store(reads=[("acc", i)]) for i in range(n)]


def test_too_many_tokens_in_flight_is_a_compile_error():
    """Unchecked, 129 tokens in flight deadlock the simulators (compute blocks on a full
    token queue while the stores that would drain it wait behind a full command queue)."""
    records = _many_in_flight(CFG.token_queue_depth + 1)
    b = ProgramBuilder(CFG)
    b.emit(*[r.insn for r in insert_tokens([Record(r.insn, r.reads, r.writes) for r in records])])
    with pytest.raises(DeadlockError):
        sim.run_image(b.build(), model="functional")
    with pytest.raises(CompileError, match="129 tokens in flight from the compute to the store module"):
        insert_tokens(records, CFG.token_queue_depth)


def test_tokens_in_flight_up_to_the_depth_run():
    records = _many_in_flight(CFG.token_queue_depth)
    b = ProgramBuilder(CFG)
    b.emit(*[r.insn for r in insert_tokens(records, CFG.token_queue_depth)])
    for model in ("functional", "cycle"):
        stats, _ = sim.run_image(b.build(), model=model)
        assert stats.insns == len(records) + 1
