"""What the ``depthcraft`` commands print: the consoles, the progress bar, verification reports.

Width: rich measures the terminal (stdin, stdout or stderr, whichever is one); the
``COLUMNS`` environment variable overrides it; in a pipe or CI log with neither, the
width is 80. Colours and the progress bar appear only on a terminal.

A verification report prints as ONE line (:class:`ReportLines`)::

    construction                  L/bound H/bound d_model    checks pass   time
    khop_doubling
      k=1                             2/2     1/1     116     622 ✓  yes   4.5s

under a heading line per construction: the parameters that tell the rows apart,
measured/bound attention layers L and heads H (``≥b``: a lower bound; ``✗``: the
bound is not met), d_model (measured, or measured/bound), the inputs checked
(``622 ✓``: all exact; ``3/622 ✗``: 3 wrong), whether the report passed, and the
time it took. The wide table goes to ``--markdown`` / ``--json``. Failures and
warnings follow (:func:`details`: the counterexample as aligned rows of input,
expected and got), then one summary line (:func:`summary`: ``23/23 passed in 2m31s``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text

from depthcraft.verify.report import certificate_kind
from depthcraft.verify.views.text import aligned_rows, wrap



class _Console(Console):
    """rich's Console with its width read at every print (the terminal, or ``COLUMNS`` as it is then).

    rich fixes the width at construction when ``COLUMNS`` is set in the environment; this module's
    consoles are made at import, so a ``COLUMNS`` set later (a user's shell, a test) would be ignored.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._width = None  # rich's private field: None = measure at every print


#: Standard output (reports, tables). No fixed width: see the module docstring.
console = _Console(highlight=False)
#: Standard error: one-line errors, never wrapped.
err_console = _Console(stderr=True, highlight=False, soft_wrap=True)

#: The fixed columns of a report line: (header, width).
COLUMNS = (("L/bound", 7), ("H/bound", 7), ("d_model", 7), ("checks", 9), ("pass", 4), ("time", 6))
#: The certificate's column (``--certify``): ``yes`` (tables), ``dom`` (tables, on the task's domain
#: only), ``exh`` (exhaustive), ``no``.
CERT_COLUMN = ("cert", 4)


def certificate_cell(cert: Optional[Dict[str, Any]]) -> Text:
    """``yes`` (proved from the tables for every input), ``dom`` (proved from the tables, using the
    task's domain as a precondition: the scope names the domain), ``exh`` (the whole input set
    checked), ``no`` or ``-`` (not run)."""
    kind = certificate_kind(cert)
    if kind is None:
        return Text("-")
    if kind == "no":
        return Text("no", style="yellow")
    return Text({"exhaustive": "exh", "domain": "dom", "tables": "yes"}[kind], style="green")


def certificate_lines(cert: Dict[str, Any], columns: int, names: Optional[Dict[int, str]] = None) -> List[str]:
    """What a certificate's ``uncertified`` entries name: the sublayer, the head, why, and the witness.

    For a certificate that does not hold, each entry is what could not be proved (``not certified:
    attn 1 head 0: ...``). For one that holds (by the exhaustive check, or on the task's domain),
    the entries are what the tables route alone did not prove: they print as a ``note:``, not as a
    failure, after one line saying what did prove it.

    ``names``: token id -> the name a user types (:meth:`Task.token_names`); a witness's ``tokens``
    entries print as those names (ids where ``names`` is None).
    """
    out: List[str] = []
    held = bool(cert["certified"])
    if held:
        kind = certificate_kind(cert)
        by = {"exhaustive": "certified by the exhaustive check of the task's whole input set",
              "domain": "certified on the task's declared domain (its scope names it)"}.get(kind, "certified")
        out += wrap(f"note: {by}; the tables route alone did not prove:", columns, indent="  ", hanging="    ")
    for u in cert.get("uncertified", []):
        where = " ".join(str(x) for x in (u.get("layer"), f"head {u['head']}" if u.get("head") is not None else None)
                         if x is not None) or "model"
        out += wrap(f"{where}: {u['why']}" if held else f"not certified: {where}: {u['why']}", columns,
                    indent="    " if held else "  ", hanging="      " if held else "    ")
        if u.get("witness"):
            witness = named_tokens(u["witness"], names) if names else u["witness"]
            out += wrap(f"witness: {_compact(witness)}", columns, indent="      " if held else "    ",
                        hanging="        " if held else "      ")
    return out


def named_tokens(obj: Any, names: Dict[int, str]) -> Any:
    """A copy of a witness with the value of every ``tokens`` entry (an id, or a list of ids) as its name."""
    if isinstance(obj, dict):
        return {k: (_name(v, names) if k == "tokens" else named_tokens(v, names)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [named_tokens(v, names) for v in obj]
    return obj


def _name(v: Any, names: Dict[int, str]) -> Any:
    if isinstance(v, list):
        return [_name(x, names) for x in v]
    return names.get(v, v) if isinstance(v, int) and not isinstance(v, bool) else v


def report_token_names(report: Dict[str, Any]) -> Optional[Dict[int, str]]:
    """Token id -> name for a registered construction's report (None for a user's program or an unknown one)."""
    from depthcraft.constructions.errors import DepthcraftError
    from depthcraft.verify import lookup

    try:
        r = lookup.resolve(report["construction"], report.get("params") or {}, sampling=False)
    except (DepthcraftError, KeyError, TypeError):
        return None
    return r.task.token_names(r.params)


def _compact(obj: Any) -> str:
    """A witness as one line: ``{a: 1, b: [..]}`` without quotes."""
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}: {_compact(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(_compact(v) for v in obj) + "]"
    return str(obj)
_FIXED = sum(w + 1 for _, w in COLUMNS)
#: Width of the progress bar, and the columns its other parts take (count, elapsed, "eta", time left).
BAR, _BAR_REST = 16, 16 + 1 + 7 + 1 + 7 + 1 + 3 + 1 + 7 + 1  # bar, 23/23, 0:01:02, eta, 0:00:30


def width() -> int:
    """The output width in columns (terminal, ``COLUMNS``, or 80)."""
    return console.size.width


def echo(line: Any = "") -> None:
    """Print one line (a str or a rich Text) as it is: no markup, no highlighting, no re-wrapping."""
    console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)


class _Count(MofNCompleteColumn):
    """done/total, as rich's column; blank on an inputs line (:func:`inputs_progress` puts its count in its text)."""

    def render(self, task):
        return Text("") if task.fields.get("inputs") else super().render(task)


def short_count(n: int) -> str:
    """``950`` -> ``"950"``, ``32768`` -> ``"32.8k"``, ``16777216`` -> ``"16.8M"``: at most 6 characters below 10^12."""
    for scale, suffix in ((10 ** 9, "G"), (10 ** 6, "M"), (10 ** 3, "k")):
        if n >= 10 * scale if suffix == "k" else n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(n)


def progress_bar() -> Progress:
    """A progress bar (description, bar, done/total, elapsed, time left) on the terminal; nothing elsewhere.

    It is transient: it disappears when the ``with`` block ends. Print through
    ``bar.console`` while it runs so that lines appear above it.
    """
    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=BAR), _Count(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                    transient=True, disable=not console.is_terminal)


def inputs_progress(bar: Progress):
    """A ``progress(check, inputs_done, inputs_total)`` callback (:func:`verify.verifier.verify`) for ``bar``.

    While a check runs, a second line under the report count shows its inputs (``exhaustive
    8.4M/16.8M``, a bar, elapsed, time left); it goes when the check ends. Nothing shows where
    ``bar`` is off (not a terminal: pipes, CI logs, ``--json`` runs read by scripts).
    """
    state: Dict[str, Any] = {}

    def progress(check: str, done: int, total: int) -> None:
        text = f"  {check} {short_count(done)}/{short_count(total)}"
        if state.get("check") != check:
            if "task" in state:
                bar.remove_task(state["task"])
            state.update(check=check, task=bar.add_task(text, total=total, inputs=True))
        bar.update(state["task"], completed=done, description=text)
        if done >= total:
            bar.remove_task(state.pop("task"))
            state.pop("check")

    return progress


#: Parameter sets estimated to take at least this many seconds get a bar of their own (:func:`timed`).
TIMED_FROM = 5.0


def timed(bar: Progress, reports: Iterable[Dict[str, Any]], estimates: Sequence[Any],
          labels: Sequence[str]) -> Iterator[Dict[str, Any]]:
    """The reports, unchanged; while each one estimated at :data:`TIMED_FROM` seconds or more is computed,
    ``bar`` shows a line for it whose total is the estimate (:class:`verify.cost.Estimate`), so that
    rich's time-left column counts down from the estimate (the bar stops short of full until the
    report arrives). Nothing shows where ``bar`` is off (not a terminal)."""
    import threading
    import time

    it = iter(reports)
    for est, label in zip(estimates, labels):
        stop, task = threading.Event(), None
        if est is not None and est.seconds >= TIMED_FROM and not bar.disable:
            task = bar.add_task(f"  {fit(label, 20)} (est.)", total=est.seconds, inputs=True)
            start = time.perf_counter()

            def tick(task=task, start=start, total=est.seconds):
                while not stop.wait(0.5):
                    bar.update(task, completed=min(time.perf_counter() - start, 0.99 * total))

            threading.Thread(target=tick, daemon=True).start()
        try:
            report = next(it)
        except StopIteration:
            return
        finally:
            stop.set()
            if task is not None:
                bar.remove_task(task)
        yield report


def fit(text: str, columns: int) -> str:
    """``text`` cut to ``columns`` cells, ending in ``…`` when cut."""
    if cell_len(text) <= columns:
        return text
    return text[:max(columns - 1, 0)] + "…"


def duration(seconds: Optional[float]) -> str:
    """``4.5s`` below a minute, ``2m31s`` below an hour, ``1h02m`` above; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def params_text(params: Dict[str, Any], keys: Optional[Sequence[str]] = None) -> str:
    """``k=2 n=100``: the parameters ``keys`` (default: all), in the report's order."""
    shown = [k for k in params if keys is None or k in keys]
    return " ".join(f"{k}={params[k]}" for k in shown)


def bound_cell(report: Dict[str, Any], key: str) -> Text:
    """``4/4``, ``5/≥2`` (a lower bound), ``6/5 ✗`` (not met, red) or ``116`` (no bound)."""
    m = report["structure"][key]
    b = report["bound"].get(key)
    if b is None:
        return Text(str(m))
    check = report.get("bound_checks", {}).get(key, {})
    lower = "≥" if check.get("kind") == "lower" else ""
    ok = check.get("ok", m <= b)
    return Text(f"{m}/{lower}{b}" + ("" if ok else " ✗"), style="" if ok else "red")


def checks_cell(report: Dict[str, Any]) -> Text:
    """Inputs checked over every check that ran: ``622 ✓`` (all exact) or ``3/622 ✗`` (3 wrong)."""
    ran = [c for c in report["checks"].values() if c]
    inputs = sum(c["inputs"] for c in ran)
    failed = sum(c["failed"] for c in ran)
    if not inputs:
        return Text("-")
    if failed:
        return Text.assemble(f"{failed}/{inputs} ", ("✗", "red"))
    return Text.assemble(f"{inputs} ", ("✓", "green"))


class ReportLines:
    """One line per verification report, under one heading line per construction.

    Args:
        labels: the parameter text of every row that will be printed (sets the first column's width).
        columns: the line width (default: :func:`width`).
    """

    def __init__(self, labels: Sequence[str], columns: Optional[int] = None, certify: bool = False):
        self.columns = columns or width()
        self.fixed = COLUMNS + ((CERT_COLUMN,) if certify else ())
        want = max([len("construction")] + [2 + cell_len(label) for label in labels])
        # at least 2 columns; below 14 the header is cut (``constr…``) and a label that does not fit
        # goes on its own line(s) above its cells (:meth:`row`)
        self.first = max(min(want, self.columns - sum(w + 1 for _, w in self.fixed)), 2)

    def header(self) -> Text:
        """The column headers."""
        t = Text(fit("construction", self.first).ljust(self.first), style="bold")
        for name, w in self.fixed:
            t.append(" " + name.rjust(w), style="bold")
        return t

    def heading(self, name: str) -> Text:
        """The line naming a construction (its rows follow)."""
        return Text(name, style="bold")

    def row(self, report: Dict[str, Any], label: str) -> List[Text]:
        """The report's line (more lines only when ``label`` is wider than the first column).

        When the first column is narrower than wrapping needs (14), a label that does not fit
        in it goes on its own line(s), wrapped at the full width, and the cells follow on a line
        of their own.
        """
        label = label or "(defaults)"
        above: List[Text] = []
        if self.first < 14 and 2 + cell_len(label) > self.first:
            above = [Text(line) for line in wrap(label, self.columns, indent="  ", hanging="  ")]
            first = [""]
        else:
            first = wrap(label, self.first, indent="  ", hanging="  ")
        t = Text(first[0].ljust(self.first))
        passed = report["passed"]
        cells = [bound_cell(report, "attn_layers"), bound_cell(report, "heads"), bound_cell(report, "d_model"),
                 checks_cell(report), Text("yes", style="green") if passed else Text("NO", style="bold red"),
                 Text(duration(report.get("seconds")))]
        if len(self.fixed) > len(COLUMNS):
            cells.append(certificate_cell(report.get("certificate")))
        for (_, w), cell in zip(self.fixed, cells):
            t.append(" " * (1 + max(w - cell.cell_len, 0)))
            t.append_text(cell)
        return above + [t] + [Text(line) for line in first[1:]]


def _tokens(text: str, count: int) -> Optional[List[str]]:
    """The display text split into its ``count`` tokens, or None when the split is ambiguous."""
    parts = text.split(" ")
    return parts if len(parts) == count else None


def counterexample_lines(cx: Dict[str, Any], columns: int, indent: str = "  ") -> List[str]:
    """A counterexample as aligned rows (position, input, expected, got; ``^`` under wrong outputs)."""
    where = ", ".join(map(str, cx["positions"]))
    found = f"found by the {cx['check']} check" + (", shrunk" if cx.get("shrunk") else "")
    lines = wrap(f"counterexample ({found}), wrong at position{'s' * (len(cx['positions']) > 1)} {where}:",
                 columns, indent=indent)
    n = len(cx["tokens"])
    rows = [("input", _tokens(cx.get("tokens_text", ""), n)), ("expected", _tokens(cx.get("expected_text", ""), n)),
            ("got", _tokens(cx.get("got_text", ""), n))]
    if all(cells is not None for _, cells in rows):
        table = [("position", [str(i) for i in range(1, n + 1)])] + rows
        return lines + aligned_rows(table, columns, marks=[p - 1 for p in cx["positions"]], indent=indent) \
            + _type_note(cx, columns, indent)
    for label, key in (("input", "tokens"), ("expected", "expected"), ("got", "got")):
        text = cx.get(f"{key}_text" if key != "tokens" else "tokens_text") or " ".join(map(str, cx[key]))
        lines += wrap(f"{label:<9} {text}", columns, indent=indent, hanging=" " * 10)
    return lines + _type_note(cx, columns, indent)


def _type_note(cx: Dict[str, Any], columns: int, indent: str) -> List[str]:
    """The counterexample's ``type_note`` (expected and got print alike but differ in type), wrapped."""
    return wrap(cx["type_note"], columns, indent=indent, hanging=indent + "  ") if cx.get("type_note") else []


def details(report: Dict[str, Any], columns: Optional[int] = None) -> List[Text]:
    """A report's failures and warnings, one block (empty when there are none)."""
    columns = columns or width()
    bad_bounds = [(k, b) for k, b in report.get("bound_checks", {}).items() if not b["ok"]]
    cx = report.get("counterexample")
    warnings = report.get("warnings", [])
    cert = report.get("certificate")
    cert_lines = certificate_lines(cert, columns, report_token_names(report)) if cert and cert.get("uncertified") \
        else []
    reduced = (report.get("sampling") or {}).get("reduced_by_certificate")
    theorem = report.get("theorem")
    if theorem and not (theorem["exhaustive"]["exact"] and theorem["random"]["exact"]):
        cert_lines = cert_lines + wrap(f"theorem's half FAILED: {theorem['claim']}", columns, indent="  ")
    na = report.get("ablation_not_applicable")
    if not (cx or bad_bounds or warnings or cert_lines or reduced or na or not report["passed"]):
        return []
    title = f"{report['construction']} {params_text(report['params'])}".strip()
    if report.get("loaded_from"):
        title += f" (loaded from {report['loaded_from']})"
    style = "bold red" if not report["passed"] else "bold yellow" if (cx or bad_bounds or warnings) else "bold"
    out = [Text(line, style=style) for line in wrap(title + (": FAILED" if not report["passed"] else ""), columns)]
    if report.get("headline"):
        out += [Text(line, style="red") for line in wrap(f"why: {report['headline']}", columns, indent="  ",
                                                         hanging="    ")]
    for key, b in bad_bounds:
        side = "is below the lower" if b.get("kind") == "lower" else "exceeds the"
        out += [Text(line, style="red") for line in
                wrap(f"{key} = {b['measured']} {side} bound {b['bound']}", columns, indent="  ")]
    if cx:
        out += [Text(line) for line in counterexample_lines(cx, columns)]
    for w in warnings:
        out += [Text(line, style="yellow") for line in wrap(f"warning: {w}", columns, indent="  ")]
    cert_style = "" if report["passed"] and cert and cert.get("certified") else "yellow"
    out += [Text(line, style=cert_style) for line in cert_lines]
    if na:
        out += [Text(line) for line in wrap(f"layer ablation: not applicable: {na}", columns, indent="  ")]
    if reduced:
        s = report["sampling"]
        out += [Text(line) for line in wrap(f"certified: sampled checks reduced to {s['samples']} random, "
                                            f"{s['hypothesis_examples']} hypothesis, {s['ablation']} ablation inputs "
                                            f"(no edge cases) "
                                            f"(asked {s['requested']['samples']})", columns, indent="  ")]
    return out


def summary(reports: Sequence[Dict[str, Any]], seconds: float) -> Text:
    """``23/23 passed in 2m31s`` (green), or red when a report failed."""
    passed = sum(bool(r["passed"]) for r in reports)
    ok = passed == len(reports)
    return Text(f"{passed}/{len(reports)} passed in {duration(seconds)}", style="bold green" if ok else "bold red")


def stream_reports(reports: Iterable[Dict[str, Any]], labels: Sequence[str],
                   descriptions: Sequence[str], bar: Optional[Progress] = None,
                   certify: bool = False) -> List[Dict[str, Any]]:
    """Print each report's line as it arrives, under a progress bar with count and time left.

    Args:
        reports: the reports, produced lazily (each is computed when the loop asks for it).
        labels: the parameter text of each report's row, in the same order.
        descriptions: what the progress bar says while each report is computed.
        bar: the progress bar to use (default: a new :func:`progress_bar`), e.g. one that
            :func:`inputs_progress` also draws on.
        certify: add the certificate's column (:data:`CERT_COLUMN`).
    Returns:
        The reports, in order.
    """
    lines = ReportLines(labels, certify=certify)
    echo(lines.header())
    out: List[Dict[str, Any]] = []
    room = max(width() - _BAR_REST - 1, 10)
    descriptions = [fit(d, room) for d in descriptions]
    with (progress_bar() if bar is None else bar) as bar:
        task = bar.add_task(descriptions[0] if descriptions else "", total=len(labels))
        for i, r in enumerate(reports):
            bar.advance(task)  # first, so that the bar redrawn under the new line counts it
            if i + 1 < len(descriptions):
                bar.update(task, description=descriptions[i + 1])
            bar.refresh()
            if not out or r["construction"] != out[-1]["construction"]:
                echo(lines.heading(r["construction"]))
            for line in lines.row(r, labels[i]):
                echo(line)
            out.append(r)
    return out


def write_outputs(reports: List[Dict[str, Any]], json_path, md_path, varying: Sequence[str]) -> List[str]:
    """Write ``--json`` / ``--markdown`` (atomically); return one line per file written, and one per
    certificate file a report wrote (``certificate_file``: where, or why none was written)."""
    from depthcraft.constructions.files import write_json_atomic, write_text_atomic
    from depthcraft.verify.report import markdown_table

    written = []
    if json_path:
        write_json_atomic(json_path, {"results": reports, "passed": all(r["passed"] for r in reports)})
        written.append(f"report written to {json_path}")
    if md_path:
        write_text_atomic(md_path, markdown_table(reports, varying))
        written.append(f"table written to {md_path}")
    for r in reports:
        f = r.get("certificate_file")
        if not f:
            continue
        if f.get("path") is None:
            written.append(f"no certificate file written: {f.get('why', '')}")
        elif f.get("model") == f["path"]:
            written.append(f"certificate ({f['bytes']} bytes) bundled with the model in {f['path']}")
        else:
            written.append(f"certificate written to {f['path']} ({f['bytes']} bytes), model to {f['model']}")
    return written


#: What the report lines' columns mean (:func:`legend`).
LEGEND = ("L/bound, H/bound: attention layers, most heads in a layer, measured from the weights / the "
          "theorem's bound (≥b: a lower bound; ✗: not met).",
          "checks: inputs checked, ✓ all exact (3/622 ✗: 3 wrong). pass: bound met, exact, every layer needed.")
#: The certificate column's values (``--certify``).
CERT_LEGEND = ("cert: yes = proved for every input up to n from the weights; exh = every input of the task's "
               "finite input set run; dom = proved on the task's declared domain; no = not certified.")


def legend(certify: bool = False, columns: Optional[int] = None) -> List[str]:
    """The report lines' legend (:data:`LEGEND`, and :data:`CERT_LEGEND` with ``certify``), wrapped at ``columns``."""
    columns = columns or width()
    out: List[str] = []
    for line in LEGEND + ((CERT_LEGEND,) if certify else ()):
        out += wrap(line, columns, hanging="  ")
    return out


def finish(reports: Sequence[Dict[str, Any]], seconds: float, written: Sequence[str] = (),
           certify: bool = False) -> None:
    """The details of every report that has any, the legend, the files written, and the summary line (last).

    Details of a failing report start with its ``why:`` (the report's ``headline``); what a passing
    report's certificate did not prove by its tables reads as a ``note:`` under the report's name.
    """
    blocks = [d for d in (details(r) for r in reports) if d]
    for block in blocks:
        echo()
        for line in block:
            echo(line)
    echo()
    for line in legend(certify):
        echo(Text(line, style="dim"))
    if written:
        echo()
    for line in written:
        for part in wrap(line, width()):
            echo(part)
    echo(summary(reports, seconds))


__all__ = ["write_outputs", "CERT_LEGEND", "COLUMNS", "LEGEND", "ReportLines", "legend", "bound_cell", "checks_cell", "console", "counterexample_lines", "details",
           "duration", "echo", "err_console", "finish", "inputs_progress", "params_text", "short_count", "progress_bar", "stream_reports", "summary", "width"]
