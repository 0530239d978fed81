"""The largest-size-within-5-minutes table (issue 12, Deliver 5): its renderer on a hand-made results file."""

from __future__ import annotations

import json

from tools import docgen


def _probe(size, outcome, wall, rss, d_model=None, message="", load=(1.0, 1.5)):
    p = {"size": size, "outcome": outcome, "wall_s": wall, "peak_rss_mib": rss, "message": message,
         "load_1min_before": load[0], "load_1min_after": load[1]}
    if d_model is not None:
        p["d_model"] = d_model
    return p


def _write(tmp_path, doc):
    perf = tmp_path / "results" / "performance"
    perf.mkdir(parents=True)
    (perf / "verify_sizes.json").write_text(json.dumps(doc))


def test_verify_sizes_table(tmp_path):
    doc = {"timeout_s": 300, "runs": [{"cpus": 2, "cpus_usable": [1]}],
           "planned": ["khop_doubling", "khop_constant_width", "retrieval_doubling", "graph_connectivity",
                       "khop_rasp"],
           "searches": {
               "khop_doubling": {"fixed": {"k": 16, "vocab": 4}, "size_param": "n", "sizes": [64, 128, 256],
                                 "probes": [_probe(64, "verified", 19.9, 525, 360),
                                            _probe(128, "verified", 61.25, 1200, 680, load=(0.4, 2.25)),
                                            _probe(256, "timeout", 300.4, 3100)]},
               "khop_constant_width": {"fixed": {"k": 16}, "size_param": "n", "sizes": [256, 512],
                                       "probes": [_probe(256, "verified", 30.0, 500, 47),
                                                  _probe(512, "verified", 70.0, 2048, 47)]},
               "retrieval_doubling": {"fixed": {}, "size_param": "d", "sizes": [4, 8],
                                      "probes": [_probe(4, "fail", 12.0, 400, 112,
                                                        message="retrieval_doubling d=4: not exact")]},
               "graph_connectivity": {"fixed": {}, "size_param": "n", "sizes": [9, 17, 33],
                                      "probes": [_probe(9, "verified", 40.0, 800, 163)]},
           }}
    _write(tmp_path, doc)
    text = docgen.render_verify_sizes(tmp_path)
    lines = text.splitlines()
    assert "stopped after 300 s" in lines[0] and "pinned to core 1 of 2" in lines[0]
    assert "1-minute load average 0.4-2.2" in lines[0]  # min and max over every probe's before / after
    assert lines[2] == ("| construction | fixed parameters | size | largest verified within 5 min | "
                        "wall, peak RSS there | first size not verified |")
    assert lines[4] == ("| `khop_doubling` | k=16 vocab=4 | n | n=128 (d_model 680) | 61.2 s, 1,200 MiB | "
                        "n=256 (timeout, > 300 s, 3,100 MiB) |")
    assert lines[5] == ("| `khop_constant_width` | k=16 | n | n=512 (d_model 47) | 70.0 s, 2,048 MiB | "
                        "none up to n=512 (last size searched) |")
    assert lines[6] == ("| `retrieval_doubling` | defaults | d | none (smallest probed: d=4) | — | "
                        "d=4 (fail: retrieval_doubling d=4: not exact) |")
    assert lines[7] == ("| `graph_connectivity` | defaults | n | n=9 (d_model 163) | 40.0 s, 800 MiB | "
                        "not probed: n=17 |")
    assert lines[8] == "| `khop_rasp` | — | — | not searched | — | — |"
    assert len(lines) == 9


FAKE_VERIFY = '''
import json, sys, time
args = sys.argv[1:]
name = args[1]
params = dict(args[i + 1].split("=") for i, a in enumerate(args) if a == "-p")
size = int(params["n"])
with open(sys.argv[0] + ".log", "a") as f:
    f.write(f"{name} {size}\\n")
if name == "slow":
    time.sleep(5)
if name == "crash" and size == 2:
    sys.exit("ValueError: n=2 is too small")
passed = size < 4
with open(args[args.index("--json") + 1], "w") as f:
    json.dump({"passed": passed, "results": [{"structure": {"d_model": 10 * size, "attn_layers": 2},
                                              "checks": {"random": {"inputs": 7}}, "seconds": 0.1,
                                              "exact": passed, "bound_ok": True}]}, f)
sys.exit(0 if passed else 1)
'''


def test_search_stops_at_the_first_failure_and_resumes(tmp_path, monkeypatch):
    """Each outcome (verified, fail, error, timeout) and the resume: a second run starts no probe."""
    import pathlib
    import sys

    bench = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import verify_sizes

    fake = tmp_path / "fake_depthcraft.py"
    fake.write_text(FAKE_VERIFY)
    monkeypatch.setattr(verify_sizes, "SEARCHES", (
        ("ok", {"k": 3}, "n", (1, 2, 4, 8)), ("crash", {}, "n", (1, 2, 4)), ("slow", {}, "n", (1, 2)),
        ("never", {}, "n", (1,))))
    out = tmp_path / "sizes.json"
    argv = ["--json", str(out), "--timeout", "2", "--command", f"{sys.executable} {fake}",
            "--only", "ok", "crash", "slow"]
    assert verify_sizes.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["planned"] == ["ok", "crash", "slow", "never"] and "never" not in doc["searches"]
    ok, crash, slow = (doc["searches"][k] for k in ("ok", "crash", "slow"))
    assert [(p["size"], p["outcome"]) for p in ok["probes"]] == [(1, "verified"), (2, "verified"), (4, "fail")]
    assert ok["probes"][1]["d_model"] == 20 and ok["probes"][1]["inputs"] == {"random": 7}
    assert ok["probes"][0]["argv"] == "depthcraft verify ok -p k=3 -p n=1"
    assert (ok["largest_verified"], ok["first_not_verified"], ok["reason"]) == (2, 4, "fail")
    assert ok["message"] == "report not passed: exact not ok"
    assert [(p["size"], p["outcome"]) for p in crash["probes"]] == [(1, "verified"), (2, "error")]
    assert crash["probes"][1]["message"] == "ValueError: n=2 is too small"
    assert [(p["size"], p["outcome"]) for p in slow["probes"]] == [(1, "timeout")]
    assert slow["probes"][0]["exit"] == 124 and slow["largest_verified"] is None
    log = (tmp_path / "fake_depthcraft.py.log").read_text().splitlines()
    assert log == ["ok 1", "ok 2", "ok 4", "crash 1", "crash 2", "slow 1"]
    assert verify_sizes.main(argv) == 0  # resumed: every search already ended, nothing runs again
    assert (tmp_path / "fake_depthcraft.py.log").read_text().splitlines() == log
    assert len(json.loads(out.read_text())["runs"]) == 2


def test_budget_leaves_probes_for_a_later_run(tmp_path, monkeypatch):
    import pathlib
    import sys

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import verify_sizes

    fake = tmp_path / "fake_depthcraft.py"
    fake.write_text(FAKE_VERIFY)
    monkeypatch.setattr(verify_sizes, "SEARCHES", (("ok", {}, "n", (1, 2)),))
    out = tmp_path / "sizes.json"
    argv = ["--json", str(out), "--timeout", "2", "--command", f"{sys.executable} {fake}"]
    assert verify_sizes.main([*argv, "--budget", "1"]) == 3  # a 2 s probe cannot end within 1 s
    assert not (tmp_path / "fake_depthcraft.py.log").exists()
    assert verify_sizes.main([*argv, "--budget", "100"]) == 0
    assert [p["size"] for p in json.loads(out.read_text())["searches"]["ok"]["probes"]] == [1, 2]
