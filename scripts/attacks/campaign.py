"""Perturbation campaign: random weight perturbations of small compiled models; report every case the
checker certifies (tables route) although the float32 model is wrong on some input (exhaustive search)."""
import sys, os, itertools
sys.path.insert(0, os.path.dirname(__file__))
from harness import *  # noqa


def perturbations(m, rng):
    P = m.params
    for li, (spec, L) in enumerate(zip(m.arch.sublayers, P["layers"])):
        if spec.kind == "attn":
            for name in ("w_q", "w_k", "w_v", "w_o"):
                for f in (0.0, 0.1, 0.5, 0.9, 1.1, 2.0, -1.0):
                    col = int(rng.integers(L[name].shape[2]))
                    yield f"L{li} {name}[:, :, {col}] *= {f}", (lambda mm, li=li, name=name, col=col, f=f:
                                                            mm.params["layers"][li][name].__setitem__((slice(None), slice(None), col), mm.params["layers"][li][name][:, :, col] * np.float32(f)))
                for s in (1e-3, 1e-1, 1.0):
                    seed = int(rng.integers(1 << 30))
                    def noise(mm, li=li, name=name, s=s, seed=seed):
                        a = mm.params["layers"][li][name]
                        a += np.random.default_rng(seed).normal(0, s, a.shape).astype(np.float32) * (a != 0)
                    yield f"L{li} {name} += N(0,{s}) on non-zeros", noise
            if L["w_o"].shape[2] >= 2:
                def swap(mm, li=li):
                    a = mm.params["layers"][li]["w_o"]
                    a[:, :, [0, 1]] = a[:, :, [1, 0]]
                yield f"L{li} swap w_o out cols 0,1", swap
        else:
            for name in ("w_1", "b_1", "w_2", "b_2"):
                for f in (0.0, 0.5, 2.0):
                    idx = tuple(int(rng.integers(s)) for s in L[name].shape)
                    def one(mm, li=li, name=name, idx=idx, f=f):
                        mm.params["layers"][li][name][idx] *= np.float32(f)
                    yield f"L{li} {name}{list(idx)} *= {f}", one
    for r in range(1, m.max_seq_len + 1):
        yield f"pos[{r}] = 0", (lambda mm, r=r: mm.params["embed"]["pos"].__setitem__(r, 0))
    u = P["unembed"]["w"]
    for _ in range(6):
        idx = (int(rng.integers(u.shape[0])), int(rng.integers(u.shape[1])))
        for f in (0.0, 0.4, 3.0):
            def un(mm, idx=idx, f=f):
                w = mm.params["unembed"]["w"]
                w[idx] = w[idx] * np.float32(f) if w[idx] != 0 else np.float32(f)
            yield f"unembed{list(idx)} -> {f}", un


def run(m, name, evaluate=None, n=None, seed=0):
    rng = np.random.default_rng(seed)
    bad, counts = [], {"valid_right": 0, "valid_WRONG": 0, "refused": 0, "unsupported": 0, "error": 0}
    for what, fn in perturbations(m, rng):
        mm = clone(m)
        fn(mm)
        try:
            _, _, _, v = certify(mm)
        except Exception as e:  # noqa
            counts["error"] += 1
            print("ERROR", name, what, type(e).__name__, e)
            continue
        if not v.valid:
            counts["unsupported" if v.unsupported else "refused"] += 1
            continue
        cx = counterexample(mm, n=n or m.max_seq_len, evaluate=evaluate)
        if cx is None:
            counts["valid_right"] += 1
        else:
            counts["valid_WRONG"] += 1
            bad.append((what, cx))
            print("VALID BUT WRONG", name, what, cx)
    print(name, counts)
    return bad


if __name__ == "__main__":
    from tracr.rasp import rasp
    run(khop(2, 5), "khop_doubling k2 n5")
    prev = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1),
                                           rasp.tokens)).named("prev")
    f = rasp.categorical(rasp.SequenceMap(lambda a, b: (a or "_") + b, prev, rasp.tokens)).named("pair")
    m = compile_program(f, {"a", "b", "c"}, 4, causal=True)
    run(m, "prev+pair causal", evaluate=tracr_eval(f))
