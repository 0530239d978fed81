"""constructions.files: every writer is atomic and symlink-safe; to_json is the one strict JSON conversion."""

import json
import math
import os

import numpy as np
import pytest

from depthcraft.constructions import files
from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.tasks.program import RaisedError


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


#: Each writer with content of its kind, and a check that the file holds that content.
WRITERS = {
    "bytes": (lambda p: files.write_bytes_atomic(p, b"\x00new"), lambda b: b == b"\x00new"),
    "text": (lambda p: files.write_text_atomic(p, "new ⊥"), lambda b: b.decode() == "new ⊥"),
    "json": (lambda p: files.write_json_atomic(p, {"a": [1, 2]}), lambda b: json.loads(b) == {"a": [1, 2]}),
    "png": (lambda p: files.save_figure_atomic(_figure(), p), lambda b: b.startswith(b"\x89PNG\r\n\x1a\n")),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_each_writer_replaces_the_file_whole_and_keeps_its_permissions(tmp_path, kind):
    write, holds = WRITERS[kind]
    path = tmp_path / "out"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    write(str(path))
    assert holds(path.read_bytes())
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["out"]  # no temporary file left


@pytest.mark.parametrize("kind", WRITERS)
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, kind, monkeypatch):
    write, _ = WRITERS[kind]
    path = tmp_path / "out"
    path.write_bytes(b"old")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(str(path))
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("kind", WRITERS)
def test_a_symlink_is_written_through(tmp_path, kind):
    write, holds = WRITERS[kind]
    target, link = tmp_path / "target", tmp_path / "link"
    target.write_bytes(b"old")
    link.symlink_to(target)
    write(str(link))
    assert link.is_symlink() and holds(target.read_bytes())


@pytest.mark.parametrize("kind", WRITERS)
def test_directories_fifos_and_missing_directories_are_refused_before_writing(tmp_path, kind):
    write, _ = WRITERS[kind]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, reason in ((tmp_path, "it is a directory"), (f"{tmp_path}/new/", "it is a directory"),
                         (fifo, r"not a regular file \(a device, FIFO or socket\)"),
                         (tmp_path / "missing" / "f", "directory .* does not exist"), ("", "empty path")):
        with pytest.raises(ParameterError, match=f"cannot write .*{reason}"):
            write(str(path))
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def test_a_failed_write_is_a_parameter_error_and_leaves_nothing(tmp_path):
    def fails(tmp):
        raise OSError(28, "No space left on device")

    with pytest.raises(ParameterError, match="cannot write .*out: No space left on device"):
        files.atomic_write(str(tmp_path / "out"), fails)
    assert os.listdir(tmp_path) == []


def test_a_json_conversion_error_writes_nothing(tmp_path):
    class Broken:
        def to_json(self):
            raise RuntimeError("cannot convert")

    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="cannot convert"):
        files.write_json_atomic(str(path), {"x": Broken()})
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]


def test_check_outputs_refuses_two_names_for_one_file_and_an_input(tmp_path):
    a = tmp_path / "a.json"
    files.check_outputs([str(a), None, str(tmp_path / "b.json")])
    with pytest.raises(ParameterError, match="twice"):
        files.check_outputs([str(a), str(tmp_path / "." / "a.json")])
    with pytest.raises(ParameterError, match="is an input of this command"):
        files.check_outputs([str(a)], inputs=[str(a)])
    assert os.listdir(tmp_path) == []


class _WithToJson:
    def to_json(self):
        return {"n": np.int64(3), "t": (1, 2)}


@pytest.mark.parametrize("value, expected", [
    (np.int64(3), 3),
    (np.float32(0.5), 0.5),
    (np.bool_(True), True),
    (np.array([[1, 2], [3, 4]], dtype=np.int16), [[1, 2], [3, 4]]),
    ((1, (2, "a")), [1, [2, "a"]]),
    (frozenset({3, 1, 2}), [1, 2, 3]),
    ({"b", 1}, ["b", 1]),  # not comparable: ordered by JSON text ('"b"' < '1')
    (float("nan"), "nan"),
    (float("inf"), "inf"),
    (-math.inf, "-inf"),
    (np.array([1.0, np.nan, -np.inf]), [1.0, "nan", "-inf"]),
    ({1: "a", None: "b", False: "c", np.int64(7): "d"}, {"1": "a", "null": "b", "false": "c", "7": "d"}),
    (RaisedError(ValueError("key is None!")), "error: ValueError: key is None!"),
    (_WithToJson(), {"n": 3, "t": [1, 2]}),
    (_WithToJson, repr(_WithToJson)),  # a class is not converted through its method
    (None, None),
    ("⊥", "⊥"),
])
def test_to_json_values(value, expected):
    got = files.to_json(value)
    assert got == expected and type(got) is type(expected)
    json.dumps(got, allow_nan=False)  # strict JSON


def test_to_json_of_other_objects_is_their_repr():
    class Thing:
        def __repr__(self):
            return "Thing()"

    assert files.to_json({"x": [Thing()]}) == {"x": ["Thing()"]}


def test_json_text_is_strict_indented_and_reads_back(tmp_path):
    data = {"loss": np.float32(np.nan), "rows": np.arange(3), "ok": True}
    assert files.json_text(data) == '{\n  "loss": "nan",\n  "rows": [\n    0,\n    1,\n    2\n  ],\n  "ok": true\n}\n'
    path = tmp_path / "r.json"
    files.write_json_atomic(str(path), data)
    assert path.read_text() == files.json_text(data)
    back = json.loads(path.read_text())
    assert math.isnan(float(back["loss"])) and back["rows"] == [0, 1, 2]
