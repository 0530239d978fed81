"""Optional TransformerLens export: the HookedTransformer computes the same logits and attention maps.

Skipped unless the optional extra is installed (pip install 'depthcraft[lens]': transformer_lens<4, torch).
"""

import numpy as np
import pytest

from depthcraft.verify import lookup
from depthcraft.constructions.errors import ParameterError

tl = pytest.importorskip("transformer_lens")
torch = pytest.importorskip("torch")
try:
    from transformer_lens import HookedTransformer  # noqa: F401
except ImportError:  # TransformerLens 4.x
    pytest.skip("TransformerLens without HookedTransformer (4.x)", allow_module_level=True)

from depthcraft.constructions.lens import to_hooked_transformer  # noqa: E402
from depthcraft.verify.tasks.khop import hop_k  # noqa: E402


def _inputs(rng, n, vocab, batch=256):
    return rng.integers(0, vocab, size=(batch, n))


@pytest.mark.parametrize("name, params", [
    ("khop_doubling", {"k": 3, "n": 12, "vocab": 4}),  # hand-built heads, attention only
    ("khop_rasp", {"k": 1, "n": 8, "vocab": 3}),  # tracr's heads and MLPs (two MLPs in a row)
])
def test_hooked_transformer_matches(name, params):
    model = lookup.resolve(name, params).build()
    ht = to_hooked_transformer(model)
    rng = np.random.default_rng(0)
    for n in (params["n"], 5):  # full length, and shorter inputs (no padding in TransformerLens)
        x = _inputs(rng, n, params["vocab"])
        ids = model.encode(x)  # BOS + tokens, no PAD
        ours = model.forward_ids(ids, collect_attention=True)
        logits, cache = ht.run_with_cache(torch.from_numpy(ids.astype(np.int64)))
        theirs = logits.detach().numpy()
        np.testing.assert_allclose(theirs, np.asarray(ours.logits), atol=1e-4)
        assert np.array_equal(model.decode(theirs, -1), model.decode(np.asarray(ours.logits), -1))
        # attention patterns of the blocks that hold our attention sublayers
        blocks = [b for b in range(ht.cfg.n_layers) if ht.blocks[b].attn.W_O.abs().sum() > 0]
        assert len(blocks) == len(ours.attention)
        for b, ours_att in zip(blocks, ours.attention):
            pat = cache[f"blocks.{b}.attn.hook_pattern"].numpy()[:, :ours_att.shape[1]]
            np.testing.assert_allclose(pat, np.asarray(ours_att), atol=1e-5)
    if name == "khop_doubling":
        x = _inputs(rng, params["n"], params["vocab"], batch=512)
        out = ht(torch.from_numpy(model.encode(x).astype(np.int64))).detach().numpy()
        assert np.array_equal(model.decode(out, -1)[:, 1:], hop_k(x, params["k"]))  # exact against the definition


def test_refuses_what_transformer_lens_cannot_express():
    import dataclasses

    model = lookup.resolve("khop_doubling", {"k": 2, "n": 6, "vocab": 3}).build()
    hard = dataclasses.replace(model, arch=dataclasses.replace(model.arch, attention="hardmax"))
    with pytest.raises(ParameterError, match="softmax attention only; this model uses 'hardmax'"):
        to_hooked_transformer(hard)
