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
