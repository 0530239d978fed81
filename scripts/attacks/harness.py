"""Helpers for the checker attacks: build a certificate, check it, and find a real counterexample."""
import copy, itertools, json
import numpy as np
from depthcraft import checker
from depthcraft.checker import program as cprog
from depthcraft.verify.certify.certificate import checker_model
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions import reference


def sink_of(m):
    return m.program.nodes[m.program.sink]


def vocab_of(m):
    cm = checker_model(m)
    return [cm.input_values[i] for i in cm.vocab_ids]


def certify(m, route="tables", premises=None):
    cm = checker_model(m)
    sink = sink_of(m)
    cert, v = checker.build(cm, sink, route, premises or {}, {"tool": "attack"})
    return cm, sink, cert, v


def recheck(cert, m):
    cm = checker_model(m)
    return checker.check(json.loads(json.dumps(cert)), cm, sink_of(m))


def program_eval(m, xs):
    """RASP semantics (depthcraft's reference evaluator with hand-built heads)."""
    sink = sink_of(m)
    try:
        return list(reference.evaluate(sink, list(xs)))
    except Exception as e:  # noqa
        return ["error: %s" % type(e).__name__] * len(xs)


def counterexample(m, n=None, vocab=None, limit=200000, evaluate=None):
    """First input (exhaustive over lengths 1..n) where the float32 model's decoded output differs
    from the program's. Returns (xs, expected, got) or None."""
    n = n or m.max_seq_len if hasattr(m, "max_seq_len") else n
    vocab = vocab or vocab_of(m)
    evaluate = evaluate or (lambda xs: program_eval(m, xs))
    count = 0
    for L in range(1, n + 1):
        batch = []
        for xs in itertools.product(vocab, repeat=L):
            batch.append(list(xs))
            count += 1
            if count > limit:
                break
        for s in range(0, len(batch), 512):
            chunk = batch[s:s + 512]
            outs = run_raw(m, chunk)
            for xs, got in zip(chunk, outs):
                want = evaluate(xs)
                got = list(got)
                if any(not cprog.same(g, w) for g, w in zip(got, want)):
                    return xs, want, got
        if count > limit:
            break
    return None


def run_raw(m, batch):
    """Decoded outputs of the float32 JAX forward, without CompiledModel.decode's int cast (True stays True)."""
    ids = m.encode(batch, length=m.max_seq_len + 1)
    lg = np.asarray(m.forward_ids(ids).logits, np.float64)[:, 1:]
    out = []
    for b, xs in enumerate(batch):
        row = []
        for i in range(len(xs)):
            k = int(lg[b, i].argmax())
            row.append(None if lg[b, i, k] < 0.5 else m.output_values[k])
        out.append(row)
    return out


def tracr_eval(prog):
    from tracr.rasp import rasp
    def ev(xs):
        try:
            return list(rasp.evaluate(prog, list(xs)))
        except Exception as e:  # noqa
            return ["error: %s" % type(e).__name__] * len(xs)
    return ev


def clone(m, **changes):
    """A copy of a CompiledModel with its own weight arrays (the catalogue caches builds: never mutate them)."""
    import dataclasses
    import jax
    params = jax.tree_util.tree_map(lambda a: np.array(a, copy=True), m.params)
    out = dataclasses.replace(m, params=params, **changes)
    out.program = m.program
    return out


def khop(k=2, n=6):
    from depthcraft.verify.lookup import resolve
    return resolve("khop_doubling", {"k": str(k), "n": str(n)}).build()


def add_score_offset(m, layer, offset, key_rows_const):
    """Add one q/k column to every head of attention sublayer ``layer`` that adds ``offset`` to every score
    (the query reads the residual row ``one``; the key reads rows ``key_rows_const``, which sum to 1 at
    every key). Softmax is shift-invariant: the softmax forward is unchanged up to rounding."""
    import dataclasses
    spec = m.arch.sublayers[layer]
    one = m.residual_labels.index("one")
    p = m.params["layers"][layer]
    a = np.sqrt(offset / spec.qk_scale)
    assert one in spec.q_rows and all(r in spec.k_rows for r in key_rows_const)
    h = p["w_q"].shape[0]
    cq = np.zeros((h, p["w_q"].shape[1], 1), np.float32)
    cq[:, list(spec.q_rows).index(one), 0] = a
    ck = np.zeros((h, p["w_k"].shape[1], 1), np.float32)
    for r in key_rows_const:
        ck[:, list(spec.k_rows).index(r), 0] = a
    p["w_q"] = np.concatenate([p["w_q"], cq], 2)
    p["w_k"] = np.concatenate([p["w_k"], ck], 2)
    return m


def two_faced_file(good, bad):
    """Model-file bytes whose tensors named by convention (``embed.token``, ``layers.<i>.w_q``, ...: what the
    checker reads) are ``good``'s, while the pytree skeleton ``tree`` (what depthcraft's io.load builds the
    runtime's weights from) points at a second copy named ``evil.*`` holding ``bad``'s weights.
    io.load's own SHA-256 (``meta["sha256"]``) is recomputed, so io.load accepts the file."""
    import json as _json
    from safetensors.numpy import save as st_save
    from depthcraft.constructions import io
    tensors = {}
    io._flatten(good.params, "", tensors)
    evil = {}
    skeleton = io._flatten(bad.params, "evil.", evil)
    tensors.update(evil)
    meta = io.metadata(good)
    meta["tree"] = skeleton
    meta["sha256"] = io._digest(tensors, meta)
    return st_save(tensors, metadata={"format": io.FORMAT, io._META_KEY: _json.dumps(meta)})
