"""Save / load of compiled models (safetensors + JSON metadata): bit-exact round trip, clear errors."""

import json
import os
import struct

import numpy as np
import pytest

from depthcraft.constructions import files, io
from depthcraft.verify import lookup
from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify import cli
from depthcraft.verify.tasks.khop import hop_k, sample_no_adjacent_repeat

P = {"k": 2, "n": 12, "vocab": 4}


@pytest.fixture(scope="module")
def doubling():
    return lookup.resolve("khop_doubling", P).build()


@pytest.fixture(scope="module")
def saved(doubling, tmp_path_factory):
    path = tmp_path_factory.mktemp("io") / "khop_doubling.safetensors"
    io.save(doubling, str(path))
    return path


def _logits(model, x):
    out = []
    for start in range(0, len(x), 2048):
        ids = model.encode(x[start:start + 2048], length=model.max_seq_len + 1)
        out.append(np.asarray(model.forward_ids(ids).logits))
    return np.concatenate(out)


def test_reload_is_bit_identical_on_10000_inputs(doubling, saved):
    loaded = io.load(str(saved))
    rng = np.random.default_rng(7)
    x = np.concatenate([sample_no_adjacent_repeat(rng, 5000, 12, 4), rng.integers(0, 4, size=(5000, 12))])
    assert x.shape == (10000, 12)
    a, b = _logits(doubling, x), _logits(loaded, x)
    assert a.dtype == b.dtype == np.float32
    assert np.array_equal(a, b)  # bit for bit
    got = loaded.decode(b, -1)[:, 1:]
    assert np.array_equal(got, hop_k(x, 2))  # and still exact against the definition
    for key in ("embed", "unembed"):
        for name, arr in doubling.params[key].items():
            assert np.array_equal(np.asarray(arr), loaded.params[key][name])
    assert loaded.arch == doubling.arch


def test_metadata_records_what_the_model_is(saved, doubling):
    meta = io.read_metadata(str(saved))
    assert meta["format"] == "depthcraft-model" and meta["format_version"] == io.FORMAT_VERSION
    assert meta["construction"] == "khop_doubling" and meta["task"] == "khop"
    assert meta["params"] == {**P, "distribution": "paper"}  # the task's sampling parameter, resolved
    assert meta["bound"] == {"attn_layers": 3, "heads": 1, "d_model": None}
    assert meta["vocab"] == [0, 1, 2, 3] and meta["output_values"] == [-1, 0, 1, 2, 3]
    assert meta["attention"] == "softmax" and meta["causal"] is True
    assert meta["residual_labels"] == doubling.residual_labels
    assert [s["kind"] for s in meta["arch"]["sublayers"]] == ["attn"] * 3
    assert meta["arch"]["sublayers"][0]["q_rows"] == list(doubling.arch.sublayers[0].q_rows)
    assert isinstance(meta["depthcraft_version"], str)


def test_value_encoding_round_trips():
    for v in (0, -1, 2.5, "a", True, None, (1, "x"), ((0, 1), 2)):
        assert io._decode_value(json.loads(json.dumps(io._encode_value(v)))) == v
    with pytest.raises(ParameterError, match="cannot save a token/output value of type set"):
        io._encode_value({1, 2})


def _copy(src, dst, mutate=None):
    data = bytearray(src.read_bytes())
    if mutate:
        data = mutate(data)
    dst.write_bytes(bytes(data))
    return str(dst)


def test_corrupt_truncated_and_foreign_files(saved, tmp_path):
    header_len = struct.unpack("<Q", saved.read_bytes()[:8])[0]

    def flip_weight(d):
        d[8 + header_len + 100] ^= 0x40
        return d

    with pytest.raises(InputError, match="do not match their SHA-256 checksum"):
        io.load(_copy(saved, tmp_path / "flip.safetensors", flip_weight))
    with pytest.raises(InputError, match="not a readable safetensors file"):
        io.load(_copy(saved, tmp_path / "cut.safetensors", lambda d: d[:len(d) // 2]))
    with pytest.raises(InputError, match="not a readable safetensors file"):
        io.load(_copy(saved, tmp_path / "cut_header.safetensors", lambda d: d[:20]))
    text = tmp_path / "notes.safetensors"
    text.write_text("hello")
    with pytest.raises(InputError, match="not a readable safetensors file"):
        io.load(str(text))
    with pytest.raises(InputError, match="no such file"):
        io.load(str(tmp_path / "missing.safetensors"))
    with pytest.raises(InputError, match="it is a directory"):
        io.load(str(tmp_path))
    from safetensors.numpy import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": np.zeros((2, 2), np.float32)}, str(foreign))
    with pytest.raises(InputError, match="not a depthcraft model"):
        io.load(str(foreign))


def _rewrite(saved, dst, edit, checksum=True):
    """Rewrite a saved model with edited metadata (valid safetensors; a recomputed checksum unless told not to)."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(saved), framework="numpy") as f:
        header = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    meta = json.loads(header["depthcraft"])
    edit(meta, tensors)
    if checksum:  # a crafted file: the checksum cannot catch it, the consistency checks must
        meta["sha256"] = io._digest(tensors, meta)
    save_file(tensors, str(dst), metadata={"format": header["format"], "depthcraft": json.dumps(meta)})
    return str(dst)


def test_edited_metadata_is_refused(saved, tmp_path):
    """The checksum covers the metadata: an edited bound or construction name cannot pass as the original."""
    def other_construction(meta, tensors):
        meta["construction"] = "khop_floor"

    def looser_bound(meta, tensors):
        meta["bound"]["attn_layers"] = 99

    for i, edit in enumerate((other_construction, looser_bound)):
        with pytest.raises(InputError, match="do not match their SHA-256 checksum; the file is corrupt or was edited"):
            io.load(_rewrite(saved, tmp_path / f"e{i}.safetensors", edit, checksum=False))
    def bad_bound(meta, tensors):  # a crafted file with a valid checksum
        meta["bound"] = {"attn_layers": "x"}

    with pytest.raises(InputError, match="malformed depthcraft metadata .bound"):
        io.load(_rewrite(saved, tmp_path / "bb.safetensors", bad_bound))
    from safetensors.numpy import save_file

    listed = tmp_path / "list.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, str(listed), metadata={"format": io.FORMAT, "depthcraft": "[1, 2]"})
    with pytest.raises(InputError, match="metadata is a JSON list, not an object"):
        io.load(str(listed))


def test_mismatched_metadata_and_versions(saved, tmp_path):
    def drop_layer(meta, tensors):
        meta["arch"]["sublayers"] = meta["arch"]["sublayers"][:2]

    with pytest.raises(InputError, match="2 layers of weights for 3 sublayers|3 layers of weights for 2 sublayers"):
        io.load(_rewrite(saved, tmp_path / "a.safetensors", drop_layer))

    def wrong_rows(meta, tensors):
        meta["arch"]["sublayers"][0]["q_rows"] = meta["arch"]["sublayers"][0]["q_rows"][:-1]

    with pytest.raises(InputError, match="layers.0.w_q has 12 residual rows, expected 11"):
        io.load(_rewrite(saved, tmp_path / "b.safetensors", wrong_rows))

    def future(meta, tensors):
        meta["format_version"] = io.FORMAT_VERSION + 1

    with pytest.raises(InputError, match=f"format version {io.FORMAT_VERSION + 1} is not supported"):
        io.load(_rewrite(saved, tmp_path / "c.safetensors", future))

    def no_arch(meta, tensors):
        del meta["arch"]

    with pytest.raises(InputError, match="incomplete or malformed depthcraft metadata"):
        io.load(_rewrite(saved, tmp_path / "d.safetensors", no_arch))

    with pytest.raises(ParameterError, match="holds construction 'khop_doubling', expected 'khop_rasp'"):
        io.load(str(saved), construction="khop_rasp")
    with pytest.raises(ParameterError, match="holds k=2, expected k=4"):
        io.load(str(saved), params={"k": 4})
    assert io.load(str(saved), construction="khop_doubling", params={"k": 2, "n": 12}).max_seq_len == 12


def test_save_is_atomic(doubling, tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    io.save(doubling, str(path))
    before = path.read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # ordinary permissions, not mkstemp's 0600

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.save(doubling, str(path))
    assert path.read_bytes() == before  # the old file is untouched
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]  # no temporary file left
    with pytest.raises(ParameterError, match="directory .* does not exist"):
        io.save(doubling, str(tmp_path / "no" / "m.safetensors"))


def test_cli_save_then_verify_and_show(tmp_path, capsys):
    path = str(tmp_path / "k2.safetensors")
    with pytest.raises(SystemExit) as e:
        cli.main(["save", "khop_doubling", "-p", "k=2", "-p", "n=12", "-p", "vocab=4", "-o", path])
    assert e.value.code == 0 and os.path.exists(path)
    with pytest.raises(SystemExit) as e:
        cli.main(["verify-saved", path, "--samples", "50", "--hypothesis", "5", "--json", str(tmp_path / "r.json")])
    assert e.value.code == 0
    report = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert report["passed"] and report["bound"] == {"attn_layers": 3, "heads": 1, "d_model": None}
    assert report["structure"]["attn_layers"] == 3 and report["loaded_from"] == path
    with pytest.raises(SystemExit) as e:
        cli.main(["show", path, "--input", "a b a c b a"])
    assert e.value.code == 0
    assert "layer 3 head 0" in capsys.readouterr().out


def test_verify_and_run_take_a_saved_model(tmp_path, capsys):
    """``verify FILE.safetensors`` is ``verify-saved`` (its --certify included), ``run FILE.safetensors`` runs
    the file; -p with a file is refused (its parameters are in the file). A file keeps the weights, not the
    RASP program: --certify proves that float32 matches hardmax and says, as a note, that nothing links the
    weights to the program (not certified, the run still passes)."""
    path = str(tmp_path / "k1.safetensors")
    with pytest.raises(SystemExit) as e:
        cli.main(["save", "khop_doubling", "-p", "k=1", "-p", "n=6", "-p", "vocab=3", "-o", path])
    assert e.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(["verify", path, "--certify", "--samples", "20", "--hypothesis", "5", "--json",
                  str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert e.value.code == 0, out
    assert "1/1 passed" in out and "not certified: model: no RASP program is linked" in " ".join(out.split())
    report = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert report["loaded_from"] == path and report["passed"] is True
    assert report["construction"] == "khop_doubling"
    assert report["params"] == {"k": 1, "n": 6, "vocab": 3, "distribution": "paper"}
    assert (report["checks"]["random"]["inputs"], report["checks"]["random"]["failed"]) == (20, 0)
    cert = report["certificate"]
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    assert [(u["check"], u["why"]) for u in cert["uncertified"]] == [
        ("program", "no RASP program is linked to these weights (a loaded or hand-made model): "
                    "only float32_matches_hardmax can be proved")]
    with pytest.raises(SystemExit) as e:
        cli.main(["run", path, "--input", "a b a c"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert [ln.split() for ln in out.splitlines() if ln.strip()] == [
        ["position", "1", "2", "3", "4"], ["input", "a", "b", "a", "c"], ["output", "⊥", "⊥", "b", "⊥"],
        ["reference", "⊥", "⊥", "b", "⊥"], ["exact"]]
    with pytest.raises(SystemExit) as e:
        cli.main(["verify", path, "-p", "k=2"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == ("depthcraft: error: -p cannot be combined with a saved model "
                                               "(its parameters are in the file)")


def test_user_program_round_trip(tmp_path, capsys):
    from tracr.rasp import rasp

    from depthcraft.constructions.compiler import compile_program
    from depthcraft import check_program

    hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")
    model = compile_program(hist, vocab=["x", "y"], max_seq_len=5, causal=False)
    path = str(tmp_path / "hist.safetensors")
    meta = io.save(model, path)
    assert meta["construction"] is None and meta["bound"] is None and meta["vocab"] == ["x", "y"]
    loaded = io.load(path)
    x = [["x", "y", "x"], ["y", "y", "y"]]
    assert loaded.run(x).tolist() == [[2, 1, 2], [3, 3, 3]]  # hist, from the definition
    r = check_program(loaded, reference=lambda xs: [xs.count(t) for t in xs], samples=32, hypothesis_examples=5)
    assert r["passed"]
    with pytest.raises(SystemExit) as e:
        cli.main(["verify-saved", path])
    assert e.value.code == 2 and "holds no registered construction" in capsys.readouterr().err


def test_a_lower_bound_survives_save_and_load(tmp_path):
    """retrieval_doubling's bound is Mușat's lower bound: a reloaded file must still check measured >= bound."""
    from depthcraft import check_program

    model = lookup.build("retrieval_doubling", d=1, distractors=1)
    path = str(tmp_path / "r1.safetensors")
    meta = io.save(model, path)
    assert meta["bound_kinds"] == {"attn_layers": "lower"}
    report = check_program(io.load(path), samples=50, hypothesis_examples=5)
    check = report["bound_checks"]["attn_layers"]
    # D = 1: floor(log2 1)+2 = 2 layers against the lower bound ceil(log_3 2) = 1
    assert (check["measured"], check["bound"], check["kind"], check["ok"]) == (2, 1, "lower", True)
    assert report["passed"]


def test_a_users_bound_on_a_construction_is_an_upper_bound():
    from depthcraft import check_program

    report = check_program("retrieval_doubling", params={"d": 1, "distractors": 1}, bound={"attn_layers": 5},
                           samples=50, hypothesis_examples=5)
    check = report["bound_checks"]["attn_layers"]
    assert (check["measured"], check["bound"], check["kind"], check["ok"]) == (2, 5, "upper", True)
    tight = check_program("retrieval_doubling", params={"d": 1, "distractors": 1}, bound={"attn_layers": 1},
                          samples=50, hypothesis_examples=5)
    assert tight["bound_checks"]["attn_layers"]["ok"] is False and not tight["passed"]
