"""Hop schedules: which pointer each trained k-hop head attends to (issue 41; SPEC §7).

The pointer-doubling construction (:func:`rasp_programs.khop.khop_doubling`) attends, layer by
layer, to the previous token, then to find^1(i) (layers 2 and 3), then to find^2, find^4, find^8
(layers 4, 5, 6): "1, then doubling" (:func:`construction_schedule`). A trained model may use
another schedule (e.g. find^3). For every head this module measures its attention against a set
of *references*, each a pointer p(i) per query i with the queries where it exists:

* ``prev``: p(i) = i - 1, for i >= 2 (position 1's previous position is BOS);
* ``find<m>`` for m = 1..:data:`MAX_M` (16): p(i) = find^m(i) (SPEC §4.1), for the queries with
  find^m(i) != 0 (the pointer exists);
* ``bos``: p(i) = 0 (the hop-count / BOS token: "parking"), every query i >= 1;
* ``self``: p(i) = i, every query i >= 1.

Per head and reference: the attention *mass* (the mean over the valid queries of the weight
A[i, p(i)], in [0, 1]) and the *argmax agreement* (the fraction of valid queries whose largest
weight is on p(i)). A head's best reference is the one with the largest mass. A layer's schedule
is the set of best references of its heads whose mass is at least :data:`MATCH` (0.5: more than
half the attention on that one position); the ``find<m>`` entries give "which m each layer
computes".

Inputs are drawn by the k-hop task code (distribution ``paper``: no two equal neighbours), the
same for every model of a given length: a k-hop model's attention depends on the hop count k
(its position-0 token), so schedules are measured at every k of :func:`measure` and reported at a
reference k (2^(L - 2), the largest k the depth-L construction computes, capped by the grid).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from depthcraft.constructions.errors import ParameterError

#: The largest m of the find^m references.
MAX_M = 16
#: The reference names, in the order of the matrices.
REFERENCES = ("prev", *(f"find{m}" for m in range(1, MAX_M + 1)), "bos", "self")
#: A head matches a reference when at least this much of its attention (mean over valid queries)
#: is on the reference's position.
MATCH = 0.5


def reference_pointers(x: np.ndarray, max_m: int = MAX_M) -> Dict[str, tuple]:
    """Every reference's pointer and validity on symbols x.

    Args:
        x: [b, n] int symbols (model positions 1..n; position 0 holds BOS / the hop count).
        max_m: the largest m of find^m.
    Returns:
        {name: (ptr [b, n+1] int64, valid [b, n+1] bool)} for ``prev``, ``find1``..``find<max_m>``,
        ``bos``, ``self`` (row 0, the BOS query, is never valid).
    Raises:
        ParameterError: x not 2-D.
    """
    from depthcraft.verify.tasks.khop import find_k

    x = np.asarray(x)
    if x.ndim != 2:
        raise ParameterError(f"symbols must be [batch, n], got shape {x.shape}")
    b, n = x.shape
    pos = np.broadcast_to(np.arange(n + 1), (b, n + 1))
    every = pos >= 1
    out = {"prev": (np.maximum(pos - 1, 0), pos >= 2)}
    for m in range(1, max_m + 1):
        p = find_k(x, m)
        out[f"find{m}"] = (p, every & (p != 0))
    out["bos"] = (np.zeros((b, n + 1), np.int64), every.copy())
    out["self"] = (pos.copy(), every.copy())
    return out


def head_scores(attention: Sequence[np.ndarray], refs: Mapping[str, tuple],
                names: Sequence[str] = REFERENCES) -> Dict[str, np.ndarray]:
    """Mass and argmax agreement of every head with every reference.

    Args:
        attention: per attention layer, [b, H, T, T] maps (rows = queries, T = n + 1).
        refs: :func:`reference_pointers` output.
        names: the references to score, in order.
    Returns:
        ``{"mass": [L, H, R], "agree": [L, H, R], "queries": [R]}`` float64 (NaN where a
        reference has no valid query); ``queries`` = the number of valid queries per reference.
    Raises:
        ParameterError: maps whose shape does not match the pointers.
    """
    L = len(attention)
    H = attention[0].shape[1]
    mass = np.full((L, H, len(names)), np.nan)
    agree = np.full((L, H, len(names)), np.nan)
    counts = np.zeros(len(names))
    for l, a in enumerate(attention):
        a = np.asarray(a, np.float64)
        ptr0 = refs[names[0]][0]
        if a.shape[0] != ptr0.shape[0] or a.shape[-1] != ptr0.shape[1] or a.shape[-2] != ptr0.shape[1]:
            raise ParameterError(f"attention {a.shape} does not match the pointers {ptr0.shape}")
        top = a.argmax(-1)  # [b, H, T]
        for j, name in enumerate(names):
            ptr, valid = refs[name]
            w = np.take_along_axis(a, ptr[:, None, :, None], -1)[..., 0]  # [b, H, T]
            nv = valid.sum()
            counts[j] = nv
            if nv:
                mass[l, :, j] = (w * valid[:, None]).sum((0, 2)) / nv
                agree[l, :, j] = ((top == ptr[:, None]) & valid[:, None]).sum((0, 2)) / nv
    return {"mass": mass, "agree": agree, "queries": counts}


def layer_schedule(mass: np.ndarray, agree: np.ndarray, names: Sequence[str] = REFERENCES,
                   match: float = MATCH) -> List[Dict[str, Any]]:
    """Per layer: each head's best reference, and the layer's schedule.

    Args:
        mass, agree: [L, H, R] (:func:`head_scores`).
    Returns:
        One dict per layer (1-based ``layer``): ``"heads": [{"head", "best", "mass", "agree"}]``,
        ``"schedule"``: the matched references (best of a head with mass >= ``match``), sorted by
        reference order; ``"find"``: ``{"m", "head", "mass", "agree", "matched"}``, the largest m
        of a head matched to find^m (the furthest pointer the layer reads) and, of the heads
        matched to that m, the one with the largest mass (the first on a tie); else (``matched``
        false) the head and m with the largest find mass.
    """
    out = []
    fcols = [j for j, n in enumerate(names) if n.startswith("find")]
    for l in range(mass.shape[0]):
        heads, matched = [], set()
        for h in range(mass.shape[1]):
            row = np.where(np.isnan(mass[l, h]), -1.0, mass[l, h])
            j = int(row.argmax())
            heads.append({"head": h + 1, "best": names[j], "mass": round(float(mass[l, h, j]), 4),
                          "agree": round(float(agree[l, h, j]), 4)})
            if mass[l, h, j] >= match:
                matched.add(j)
        found = [(int(hd["best"][4:]), float(mass[l, hd["head"] - 1, names.index(hd["best"])]), hd["head"] - 1)
                 for hd in heads if hd["best"].startswith("find") and hd["mass"] >= match]
        if found:  # the furthest pointer a head of the layer reads; of its heads, the one with the most mass
            m, _, h = max(found, key=lambda f: (f[0], f[1], -f[2]))
            j = names.index(f"find{m}")
        else:
            fm = np.where(np.isnan(mass[l][:, fcols]), -1.0, mass[l][:, fcols])
            h, jj = np.unravel_index(int(fm.argmax()), fm.shape)
            j = fcols[jj]
        out.append({"layer": l + 1, "heads": heads, "schedule": [names[j] for j in sorted(matched)],
                    "find": {"m": int(names[j][4:]), "head": int(h) + 1, "mass": round(float(mass[l, h, j]), 4),
                             "agree": round(float(agree[l, h, j]), 4), "matched": bool(found)}})
    return out


def construction_schedule(depth: int) -> List[str]:
    """The doubling construction's reference per attention layer: prev, find1, find1, find2, find4, ...
    (layer l >= 4 attends to find^(2^(l-3)))."""
    return ["prev"] + ["find1" if l <= 3 else f"find{2 ** (l - 3)}" for l in range(2, depth + 1)]


def reference_k(depth: int, ks: Sequence[int]) -> int:
    """The k a depth's schedule is reported at: 2^(depth - 2), or the largest of ``ks`` below it."""
    want = 2 ** max(depth - 2, 0)
    below = [k for k in ks if 1 <= k <= want]
    return max(below) if below else min(k for k in ks if k >= 1)


def measure(maps_fn: Callable[[int, np.ndarray], Sequence[np.ndarray]], symbols_fn: Callable[[int], np.ndarray],
            ks: Sequence[int], depth: int) -> Dict[str, Any]:
    """A model's schedule at every k.

    Args:
        maps_fn: (k, symbols [b, n]) -> the model's attention maps on them at hop count k.
        symbols_fn: k -> the symbols [b, n] to measure on.
        ks: hop counts (>= 1).
        depth: attention layers (for the reference k).
    Returns:
        ``{"k_ref", "construction", "by_k": {str(k): {"layers": layer_schedule, "queries"}, with
        "mass", "agree" ([L][H][R] lists) at k_ref only}, "layers": the layers at k_ref}``.
    """
    by_k: Dict[str, Any] = {}
    for k in ks:
        x = symbols_fn(k)
        sc = head_scores(maps_fn(k, x), reference_pointers(x))
        by_k[str(k)] = {"layers": layer_schedule(sc["mass"], sc["agree"]),
                        "mass": np.round(sc["mass"], 4).tolist(), "agree": np.round(sc["agree"], 4).tolist(),
                        "queries": sc["queries"].astype(int).tolist()}
    k_ref = reference_k(depth, ks)
    for k, rec in by_k.items():  # the matrices at the reference k only (keeps schedules.json small)
        if k != str(k_ref):
            rec.pop("mass"), rec.pop("agree")
    return {"k_ref": k_ref, "construction": construction_schedule(depth), "references": list(REFERENCES),
            "match": MATCH, "by_k": by_k, "layers": by_k[str(k_ref)]["layers"]}


def schedule_text(layers: Sequence[Mapping[str, Any]]) -> str:
    """A schedule as one short string per layer: ``prev | find1 | find3,find4 | -`` (find^m as ``f<m>``)."""
    def short(n: str) -> str:
        return "f" + n[4:] if n.startswith("find") else n
    return " | ".join(",".join(short(n) for n in l["schedule"]) or "-" for l in layers)


def write_figure(path: str, title: str, measured: Mapping[str, Any]) -> None:
    """Heat map of every head's mass on every reference at the reference k (rows layer.head,
    columns the references), the construction's reference of each layer framed in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    k = str(measured["k_ref"])
    mass = np.asarray(measured["by_k"][k]["mass"], float)
    L, H, R = mass.shape
    names = measured["references"]
    fig, ax = plt.subplots(figsize=(10, 0.32 * L * H + 1.6))
    im = ax.imshow(np.nan_to_num(mass.reshape(L * H, R)), vmin=0, vmax=1, cmap="Blues", aspect="auto")
    for l, ref in enumerate(measured["construction"]):
        j = names.index(ref)
        ax.add_patch(plt.Rectangle((j - 0.5, l * H - 0.5), 1, H, fill=False, ec="red", lw=1.2))
        if l:
            ax.axhline(l * H - 0.5, color="black", lw=0.8)
    for (i, j), v in np.ndenumerate(mass.reshape(L * H, R)):
        if v >= 0.1:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=5, color="white" if v > 0.6 else "black")
    ax.set_xticks(range(R), [n.replace("find", "f") for n in names], fontsize=7)
    ax.set_yticks(range(L * H), [f"L{l + 1}.h{h + 1}" for l in range(L) for h in range(H)], fontsize=6)
    sched = schedule_text(measured["layers"])
    cons = " | ".join(n.replace("find", "f") for n in measured["construction"])
    ax.set_title(f"{title} (k = {k}): attention mass on each reference\nschedule {sched}\n"
                 f"construction {cons} (red)", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.03)
    save_figure_atomic(fig, path)
    plt.close(fig)


__all__ = ["MATCH", "MAX_M", "REFERENCES", "construction_schedule", "head_scores", "layer_schedule", "measure",
           "reference_k", "reference_pointers", "schedule_text", "write_figure"]


def model_maps_fn(params: Any, arch: Any) -> Callable[[np.ndarray], List[np.ndarray]]:
    """ids [b, T] -> the model's attention maps (the runtime's forward, one [b, H, T, T] per layer)."""
    import jax

    from depthcraft.constructions.runtime import as_jax, forward

    p = as_jax(params)
    return lambda ids: [np.asarray(a) for a in forward(p, jax.numpy.asarray(ids, jax.numpy.int32), arch,
                                                       collect_attention=True).attention]


def sweep_schedules(sweep_dir: str, size: int = 64, seed: int = 7,
                    progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """The schedule of every trained model of a k-hop sweep (its checkpoints, every seed).

    Args:
        sweep_dir: a ``depthcraft train khop`` output folder (``checkpoints/<group>`` inside).
        size: sequences per k; seed: their stream (the same inputs for every model).
    Returns:
        {model name (``<group>/seed<s>``): :func:`measure`'s dict plus ``depth``, ``seed``,
        ``looped``, ``source``}.
    Raises:
        InputError: no checkpoints in ``sweep_dir``, or one that cannot be read.
    """
    import os

    from depthcraft.constructions.errors import InputError
    from depthcraft.verify.crosscheck.checkpoint import read_meta
    from depthcraft.verify.crosscheck.train import load_trained

    root = os.path.join(sweep_dir, "checkpoints")
    groups = sorted(g for g in (os.listdir(root) if os.path.isdir(root) else [])
                    if read_meta(os.path.join(root, g)) is not None)
    if not groups:
        raise InputError(f"{sweep_dir}: no training checkpoints under {root}")
    out: Dict[str, Any] = {}
    for g in groups:
        meta = read_meta(os.path.join(root, g))["meta"]["config"]
        if meta.get("task") != "khop":
            raise InputError(f"{root}/{g}: a {meta.get('task')} model, not k-hop")
        for s in meta.get("seeds") or [meta["train"]["seed"]]:
            tm = load_trained(os.path.join(root, g), seed=s)
            run = model_maps_fn(tm.params, tm.arch)
            data = tm.data
            ks = [int(c["k"]) for c in data.conditions]
            local = {k: i for i, k in enumerate(ks)}
            cache: Dict[int, np.ndarray] = {}

            def symbols(k, data=data, cache=cache):
                if k not in cache:
                    cache[k] = data.task.sample(data.conditions[local[k]], np.random.default_rng([seed, 41, k]), size)
                return cache[k]

            def maps(k, x, data=data, run=run):
                return run(data.condition_batch(local[k], x).ids)

            rec = measure(maps, symbols, [k for k in ks if k >= 1], tm.model.depth)
            rec.update(depth=tm.model.depth, seed=int(s), looped=tm.model.looped, heads=tm.model.heads,
                       source=os.path.join(sweep_dir, "checkpoints", g), step=tm.step)
            out[f"{g}/seed{s}"] = rec
            if progress:
                progress(f"{g} seed {s}: {schedule_text(rec['layers'])}")
    return out
