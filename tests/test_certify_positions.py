"""Position-wise value sets (verify/certify/positions.py) and the program check's reachability filter.

``ictm_parse_copy_match`` (softmax): its match head's table lets BOS outscore an agreeing key
when a copy P_s is 0 at the query, which happens only at positions the head never reads
(P_s is at least 1 at every block's last content and label position). The filter drops
those rows; a program where the row IS reached must still fail.
"""

import itertools

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.primitives import Read, match, position_map
from depthcraft.constructions.reference import Evaluator
from depthcraft.rasp_programs.chen_zou import ictm_parse_copy_match, parse
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.positions import possible
from tracr.rasp import rasp

N_T, M = 2, 2  # template length, examples
B = N_T + 1
MAXLEN = M * B + N_T


def _offset(i):
    return 0 if i == 0 else (i - 1) % B + 1


def _block(i):
    return (i - 1) // B


def test_possible_copies_are_at_least_one_where_the_match_reads():
    program = ictm_parse_copy_match(N_T)
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=MAXLEN, causal=True)
    link = model.program
    copies = sorted(nm for nm in link.nodes if nm.startswith("P") and nm[1].isdigit())
    assert len(copies) == N_T
    for nm in copies:
        s = int(nm[1:].split("_")[0])
        for pos in range(1, MAXLEN + 1):
            got = possible(link, nm, pos, MAXLEN)
            if _offset(pos) >= N_T:  # last content and label positions: the first occurrence's offset
                assert got == set(range(1, s + 1)), (nm, pos, got)
            else:  # no target: the softmax head falls back to BOS, whose value is 0
                assert got == {0}, (nm, pos, got)
    # and on every input, the program's values are in these sets (the claim, on the definition)
    ev_inputs = [list(x) for x in itertools.product(range(3), repeat=MAXLEN)][:400]
    for x in ev_inputs:
        ev = Evaluator()
        for nm in copies:
            vals = ev.evaluate(link.nodes[nm], x)
            for pos, v in enumerate(vals, start=1):
                assert v in possible(link, nm, pos, MAXLEN)


def test_ictm_softmax_is_certified():
    program = ictm_parse_copy_match(N_T)
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=MAXLEN, causal=True)
    cert = certify(model)
    assert cert["certified"], cert["uncertified"]


def test_a_reached_bos_row_is_still_not_certified():
    # copies that never find their target (position_map to None: BOS, value 0) at EVERY position:
    # the query's P_s is 0 where the match reads it, BOS agrees with it and outscores the examples
    pattern = parse(where=lambda i, j: _block(i) == _block(j) and _offset(i) <= N_T and _offset(j) <= N_T,
                    fn=_offset)
    copies = [position_map(lambda i: None, Read(pattern, name=f"Q{s}"), name=f"cp{s}") for s in range(1, N_T + 1)]
    program = match([(c, c) for c in copies], [Read(rasp.tokens, name="label")],
                    where=lambda i, j: _offset(i) == N_T and _offset(j) == B, select="last", name="m")[0]
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=MAXLEN, causal=True)
    cert = certify(model)
    assert not cert["certified"]
    bad = [u for u in cert["uncertified"] if u["layer"] == "attn 3"]
    assert bad and "BOS" in bad[0]["why"]
    # reproduce: an input with one example block, where the program reads its label and the model does not
    x = [0, 1, 6, 2, 3]  # block 0: content 0 1, label 6; query block: 2 3
    want = Evaluator().evaluate(program, x)[-1]
    assert want == 6
    assert model.run([x])[0][-1] != want


# ------------------------------------------------------------------ tracr SOps: (value, index) pairs

from depthcraft.constructions.compiler import compile_with_tracr  # noqa: E402
from depthcraft.rasp_programs.khop import khop_rasp  # noqa: E402
from depthcraft.verify.certify.values import ValueAnalysis  # noqa: E402


def _pair_width(upto):
    """SelectorWidth of "prev[j] == x_i and upto(j, i)" over (value, index) pairs (khop_rasp's count)."""
    idx = rasp.indices
    prev = rasp.Aggregate(rasp.Select(idx, idx, lambda k, q: k == q - 1), rasp.tokens).named("prev")
    qp = rasp.SequenceMap(lambda t, i: (t, i), rasp.tokens, idx).named("tok_idx")
    kp = rasp.SequenceMap(lambda p, i: (p, i), prev, idx).named("prev_idx")
    return rasp.SelectorWidth(rasp.Select(kp, qp, lambda k, q: k is not None and q is not None and k[0] == q[0]
                                          and upto(k[1], q[1]))).named("count")


def _label(link, prefix):
    (nm,) = [nm for nm in link.nodes if nm.rsplit("_", 1)[0] == prefix]
    return nm


def test_pair_index_is_the_position():
    model = compile_with_tracr(_pair_width(lambda j, i: j <= i), vocab=[0, 1, 2], max_seq_len=5)
    link = model.program
    for pos in range(1, 6):
        got = possible(link, _label(link, "prev_idx"), pos, 5)
        assert got is not None and {v[1] for v in got if v is not None} == {pos - 1}
        assert possible(link, _label(link, "tok_idx"), pos, 5) == {(t, pos - 1) for t in (0, 1, 2)}


def test_pair_selector_at_or_before_the_query_passes_the_causal_check():
    cert = certify(compile_with_tracr(_pair_width(lambda j, i: j <= i), vocab=[0, 1, 2], max_seq_len=5))
    assert not [u for u in cert["uncertified"] if "causal mask may hide" in u["why"]]


def test_pair_selector_that_reads_the_next_key_is_still_refused():
    # j <= i + 1: the key right after the query is selected, which a causal model hides
    model = compile_with_tracr(_pair_width(lambda j, i: j <= i + 1), vocab=[0, 1, 2], max_seq_len=5)
    cert = certify(model)
    assert not cert["certified"]
    bad = [u for u in cert["uncertified"] if "causal mask may hide" in u["why"]]
    assert bad
    w = bad[0]["witness"]
    assert w["key"]["position"] == w["query"]["position"] + 1
    # reproduce on the definition: x = 0 0: at position 1 the selector counts key 2 (prev 0, index 1)
    assert rasp.evaluate(_pair_width(lambda j, i: j <= i + 1), [0, 0])[0] == 1
    assert model.run([[0, 0]])[0][0] != 1


def _distinct_but_none(values):
    vals = [v for v in values if v is not None]
    return len(set(vals)) == len(vals)


def test_rank_within_a_group_is_injective_but_none_on_every_input():
    program = khop_rasp(1)
    model = compile_with_tracr(program, vocab=[0, 1, 2], max_seq_len=5)
    link = model.program
    key = next(e for nm, e in link.nodes.items() if nm.startswith("prev_rank"))
    assert ValueAnalysis(link).injective_but_none(key)
    for length in range(1, 6):  # the claim, on the definition (tracr's evaluator)
        for x in itertools.product([0, 1, 2], repeat=length):
            assert _distinct_but_none(rasp.evaluate(key, list(x))), x


def test_rank_that_crosses_groups_is_not_injective():
    idx = rasp.indices
    prev = rasp.Aggregate(rasp.Select(idx, idx, lambda k, q: k == q - 1), rasp.tokens).named("prev")
    kp = rasp.SequenceMap(lambda p, i: (p, i), prev, idx).named("prev_idx")
    # counts every earlier key, whatever its group: (prev, rank) can repeat
    rank = rasp.SelectorWidth(rasp.Select(kp, kp, lambda k, q: k is not None and q is not None
                                          and k[1] <= q[1] - 2)).named("rank")
    key = rasp.SequenceMap(lambda p, c: (p, c), prev, rank).named("prev_rank")
    model = compile_with_tracr(key, vocab=[0, 1, 2], max_seq_len=5)
    link = model.program
    assert not ValueAnalysis(link).injective_but_none(link.nodes[_label(link, "prev_rank")])
    # and indeed: x = 0 0 0 0 holds (0, 0) at positions 2 and 3
    assert not _distinct_but_none(rasp.evaluate(key, [0, 0, 0, 0]))
