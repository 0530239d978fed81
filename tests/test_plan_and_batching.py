"""Issue 12: the planned runtime equals the dense one exactly; batching checks changes no result; the cache folder."""

import os
import pathlib
import subprocess
import sys

import numpy as np

from depthcraft.constructions import cache
from depthcraft.constructions.runtime import GATHER, plan
from depthcraft.verify import lookup
from depthcraft.verify.checks import (CheckResult, batch_rows, bucket, check_batches, hypothesis_check,
                                      hypothesis_examples, predict)

CASES = [
    ("khop_doubling", {"k": 4, "n": 32}),
    ("khop_constant_width", {"k": 4, "n": 64}),
    ("retrieval_doubling", {"d": 4}),
    ("sc_memorize", {}),
    ("tm_parse_map", {"attention": "relu"}),
]


def test_planned_forward_equals_dense_forward_exactly(resolved):
    """Logits, final residual and attention margins are bit-identical with and without the plan."""
    r, model = resolved
    x = r.task.sample(r.params, np.random.default_rng(1), 40)
    ids = model.encode(x, length=model.max_seq_len + 1)
    dense = model.forward_ids(ids, planned=False, collect_attention=True)
    planned = model.forward_ids(ids, planned=True, collect_attention=True)
    assert np.array_equal(np.asarray(dense.logits), np.asarray(planned.logits))
    assert np.array_equal(np.asarray(dense.residual), np.asarray(planned.residual))
    for a, b in zip(dense.attn_mass + dense.attention, planned.attn_mass + planned.attention):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    dense = model.forward_ids(ids[:8], planned=False, collect_residuals=True)
    planned = model.forward_ids(ids[:8], planned=True, collect_residuals=True)
    assert len(planned.residuals) == len(model.arch.sublayers) + 1 and planned.head_outputs
    for a, b in zip(dense.residuals + dense.head_outputs + dense.scores,
                    planned.residuals + planned.head_outputs + planned.scores):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_plan_gathers_exactly_the_one_hot_projections(resolved):
    """A projection becomes a gather iff every output column has at most one non-zero; values match the matrix."""
    _, model = resolved
    planned = plan(model.params, model.arch)
    gathers = 0
    for spec, dense, p in zip(model.arch.sublayers, model.params["layers"], planned["layers"]):
        names = ("w_q", "w_k", "w_v", "w_o") if spec.kind == "attn" else ("w_1", "w_2")
        for name in names:
            w = np.asarray(dense[name])
            flat = w.reshape(-1, w.shape[-1]) if name == "w_o" else w
            one_hot = (np.count_nonzero(flat, axis=-2) <= 1).all()
            assert (name + GATHER in p) == bool(one_hot) and (name in p) != bool(one_hot)
            if not one_hot:
                continue
            gathers += 1
            g = p[name + GATHER]
            rows = {"w_q": spec.q_rows, "w_k": spec.k_rows, "w_v": spec.v_rows, "w_1": spec.in_rows}.get(name)
            # rebuild the dense matrix over the full residual (or the previous activation) from index and scale
            if name in ("w_o", "w_2"):
                rebuilt = np.zeros_like(flat)
                cols = np.arange(flat.shape[-1])
                rebuilt[np.asarray(g["index"]), cols] = np.asarray(g["scale"])
                assert np.array_equal(rebuilt, flat)
            else:
                full = np.arange(len(model.residual_labels)) if rows is None else np.asarray(rows)
                mats = w if name != "w_1" else w[None]
                idx = np.asarray(g["index"]).reshape(len(mats), -1)
                scale = np.asarray(g["scale"]).reshape(len(mats), -1)
                for h, m in enumerate(mats):
                    big = np.zeros((len(model.residual_labels), m.shape[1]), m.dtype)
                    big[full] = m
                    rebuilt = np.zeros_like(big)
                    rebuilt[idx[h], np.arange(m.shape[1])] = scale[h]
                    assert np.array_equal(rebuilt, big)
    assert gathers > 0


def test_bucket_and_batch_rows():
    """Buckets are the next power of two up to the batch; batch_rows is a power of two within the budget."""
    assert [bucket(r, 64) for r in (1, 2, 3, 5, 33, 64, 65)] == [1, 2, 4, 8, 64, 64, 64]
    assert bucket(100, 1000) == 128

    class M:  # only what batch_rows reads
        max_seq_len = 100
        residual_labels = ["x"] * 742

    per_row = 101 * 742 * 4
    assert batch_rows(M(), budget=16 << 20) == 32  # 16 MiB / 299,768 bytes = 55.9 -> 32
    assert batch_rows(M(), budget=per_row - 1) == 1
    assert batch_rows(M(), budget=per_row * 4) == 4
    assert batch_rows(M(), budget=1 << 40, cap=1024) == 64  # attention map: 2^20 // 101^2 = 102 -> 64
    assert batch_rows(M(), budget=1 << 40, cap=32) == 32

    class Long:  # khop_constant_width n=1024: a small residual stream, a large attention map
        max_seq_len = 1024
        residual_labels = ["x"] * 47

    assert batch_rows(Long()) == 1  # 1025^2 > 2^20 elements: one row per call (at least 1)


def test_packed_edge_groups_give_the_per_group_result():
    """Checking edge groups in shared calls counts, fails and keeps margins exactly as one group at a time."""
    r = lookup.resolve(lookup.get("khop_doubling"), {"k": 2, "n": 12})
    model = r.build()
    groups = list(r.task.edge_cases(r.params)) + [r.task.sample(r.params, np.random.default_rng(0), 5)]
    together = check_batches(model, r.task, r.params, groups, "edge")
    alone = CheckResult()
    for g in groups:
        check_batches(model, r.task, r.params, [g], "edge", result=alone)
    assert together.to_json() == alone.to_json()
    assert together.inputs == sum(len(g) for g in groups)
    assert together.attention == alone.attention and together.output_gap == alone.output_gap
    # predict on one row and inside a batch: the same outputs
    x = groups[-1]
    one = np.concatenate([predict(model, x[i:i + 1], r.task.none_value)[0] for i in range(len(x))])
    assert np.array_equal(one, predict(model, x, r.task.none_value)[0])


def test_batched_hypothesis_check_equals_one_by_one():
    """The drawn examples checked together give the count and margins of hypothesis's own one-by-one run."""
    r = lookup.resolve(lookup.get("khop_doubling"), {"k": 2, "n": 12})
    model = r.build()
    examples = hypothesis_examples(r.task, r.params, 30, seed=3)
    assert len(examples) == 30 and all(len(e) >= 1 for e in examples)
    batched = hypothesis_check(model, r.task, r.params, 30, seed=3)
    from depthcraft.verify.checks import hypothesis_one_by_one

    single = hypothesis_one_by_one(model, r.task, r.params, 30, 3)
    assert batched.to_json() == single.to_json()
    assert batched.inputs == 30 and batched.attention == single.attention and batched.output_gap == single.output_gap


def test_cache_dir_env(monkeypatch, tmp_path):
    """DEPTHCRAFT_CACHE_DIR names the folder; 'off' (or empty) disables it; XDG_CACHE_HOME is the default base."""
    monkeypatch.setenv("DEPTHCRAFT_CACHE_DIR", str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"
    for off in ("off", "", "0", "OFF", "none"):
        monkeypatch.setenv("DEPTHCRAFT_CACHE_DIR", off)
        assert cache.cache_dir() is None
    monkeypatch.delenv("DEPTHCRAFT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform not in ("darwin", "win32"):
        assert cache.cache_dir() == tmp_path / "xdg" / "depthcraft"


def test_verify_writes_compilations_to_the_cache_and_no_hypothesis_folder(tmp_path):
    """A verify run fills <cache>/jax with compilations and leaves no .hypothesis/ in the working directory."""
    env = dict(os.environ, DEPTHCRAFT_CACHE_DIR=str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "depthcraft", "verify", "khop_doubling", "-p", "k=1", "-p", "n=6",
                           "--samples", "20", "--hypothesis", "5"], cwd=work, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "cache" / "jax").iterdir())
    assert not (work / ".hypothesis").exists()
    assert list(work.iterdir()) == []


def test_performance_renderers_on_synthetic_results(tmp_path):
    """The docs tables of docs/performance.md: ratios to jit(tracr), skipped batches, targets met or not."""
    import json

    from tools import docgen

    perf = tmp_path / "results" / "performance"
    perf.mkdir(parents=True)
    row = {"batch": 16, "jit(tracr)": 50.0, "dense": 100.0, "plan": 300.0, "agree": True}
    skipped = {"batch": 4096, "skipped": "residual stream 7.2 GiB > --max-gib 2.0"}
    (perf / "runtime.json").write_text(json.dumps({
        "construction": "khop_doubling", "vocab": 4, "cpus": 2,
        "sizes": [{"k": 16, "n": 100, "d_model": 742, "rows": [row, skipped], "apply": None,
                   "best": {"jit(tracr)": [50.0, 16], "dense": [100.0, 16], "plan": [300.0, 16]}}]}))
    measured = {"construction": "khop_doubling", "k": 16, "n": 100, "d_model": 540, "flops_per_seq": 36e6,
                "rates": {"apply": 0.5, "jit(tracr)": 50.0, "runtime": 300.0, "reference": 6000.0},
                "best_batch": {"jit(tracr)": 16, "runtime": 32}, "memory_mib": {"jit(tracr)": 80.0, "runtime": 20.0},
                "gflops_per_s": {"jit(tracr)": 1.8, "runtime": 10.8, "apply": 0.02}, "not_run": {},
                "matmul_gflops_per_s": 60.0, "load_1min": 2.0}
    wide = dict(measured, n=1024, d_model=5160, rates={"runtime": 2.0, "reference": 900.0},
                not_run={"apply": "not run: d_model grows", "jit(tracr)": "not run: d_model grows"})
    (perf / "benchmark.json").write_text(json.dumps({"cpus": 2, "runs": [{"peak_rss_mib": 900}],
                                                   "cases": [measured, wide]}))
    case = {"construction": "khop_doubling", "params": {"k": 16, "n": 256}, "samples": 200, "exit": 0,
            "timed_out": False, "wall_s": 75.0, "peak_rss_mib": 1500, "passed": True, "target_wall_s": 60,
            "target_rss_gib": None, "load_1min_before": 1.96, "load_1min_after": 2.31}
    stopped = dict(case, params={"k": 64, "n": 1024}, timed_out=True, wall_s=300.2, exit=-9, passed=None,
                   target_wall_s=300, target_rss_gib=4.0)
    (perf / "verify_targets.json").write_text(json.dumps({"timeout_s": 300, "cpus": 2, "cases": [case, stopped]}))
    text = docgen.render_runtime(tmp_path)
    assert "| k=16 n=100 (d_model 742) | 16 | 50.0 | 100.0 | 300.0 | 2.00x | 6.00x |" in text
    assert "skipped: residual stream 7.2 GiB" in text
    text = docgen.render_benchmark(tmp_path)
    assert ("| `khop_doubling` k=16 n=100 | 540 | 36.0 | 0.5/s | 50.00/s (batch 16) | 300/s (batch 32) | "
            "6,000/s | 6.00x | 600x | 0.05x | 80.0 / 20.0 | 1.80 / 10.80 | 60 | 2.0 |") in text
    assert "| — (not run: d_model grows) | — (not run: d_model grows) | 2.00/s (batch 32) | 900/s | — | — |" in text
    assert "| 540 | 300/s (batch 32) | 6.00x | 600x |" in docgen.render_benchmark_summary(tmp_path)
    (perf / "ablation.json").write_text(json.dumps([{
        "construction": "khop_doubling", "params": {"k": "64", "n": "512"}, "d_model": 3636, "attn_layers": 8,
        "inputs": 42, "old_first_s": 40.0, "old_s": 36.0, "new_first_s": 25.0, "new_s": 20.0, "same_result": True,
        "load_1min": 3.04}]))
    assert ("| `khop_doubling` k=64 n=512 | 3636 | 8 | 42 | 40.0 s / 36.0 s | 25.0 s / 20.0 s | 1.80x | 1 | yes | 3.0 |"
            in docgen.render_ablation(tmp_path))
    targets = docgen.render_verify_targets(tmp_path)
    assert "| `khop_doubling` k=16 n=256, 200 samples | 75.0 s, 1,500 MiB | 2.0 -> 2.3 | < 60 s | **not met** |" \
        in targets
    assert "> 300 s (stopped)" in targets and targets.count("**not met**") == 2
