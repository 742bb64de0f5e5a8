"""``a3m bench --plot``: charts drawn from synthetic bench results, and clear argument errors."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from a3m.benchmarks import plot
from a3m.cli.main import main

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MACHINE = {"cpus": 2, "python": "3.11.7", "platform": "Linux-test"}


def throughput(workload: str = "pushpull", **over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "workload": workload, "size": 64, "messages": 20000, "msgs_per_s": 66475.0,
        "received": 20000, "a3m": {"receiver": {}, "sender": {}},
        "baselines": {"raw_udp": {"msgs_per_s": 209027.1, "lost": 12},
                      "pyzmq": {"msgs_per_s": 917427.0},
                      "pynng": {"error": "worker exited with 1"}},
        "vs_raw_udp": 0.318, "elapsed_s": 2.4, "machine": MACHINE,
    }
    r.update(over)
    return r


def latency(**over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "workload": "reqrep", "size": 64, "messages": 1000, "p50_us": 323.7, "p90_us": 454.1,
        "p99_us": 571.3, "max_us": 1926.4, "round_trips": 1000,
        "baselines": {"raw_udp": {"p50_us": 37.5, "p99_us": 76.6},
                      "pyzmq": {"p50_us": 146.7, "p99_us": 214.3},
                      "pynng": {"p50_us": 179.2, "p99_us": 252.7}},
        "p50_vs_pyzmq": 2.207, "elapsed_s": 2.6, "machine": MACHINE,
    }
    r.update(over)
    return r


def assert_png(path: Path, min_width: int = 400) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, "not a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= min_width and height >= 300
    assert len(data) > 10_000, "suspiciously small chart"
    assert data.rstrip(b"\0")[-8:-4] == b"IEND", "truncated PNG"
    return width, height


def save(tmp_path: Path, name: str, result: dict[str, Any]) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return str(p)


# ---------------------------------------------------------------------------- drawing


@pytest.mark.parametrize("result", [throughput(), throughput("pubsub"), latency(),
                                    throughput(baselines={}), latency(baselines={}),
                                    throughput(baselines={"raw_udp": {"skipped": "too big"}})],
                         ids=["pushpull", "pubsub", "reqrep", "no-baselines",
                              "reqrep-no-baselines", "skipped"])
def test_one_result_draws_a_png(tmp_path: Path, result: dict[str, Any]) -> None:
    out = tmp_path / "chart.png"
    assert plot.plot_result(result, str(out)) == str(out)
    assert_png(out)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_several_results_one_panel_each(tmp_path: Path, n: int) -> None:
    results = [latency() if i % 2 else throughput() for i in range(n)]
    one = tmp_path / "one.png"
    many = tmp_path / "many.png"
    plot.plot_result(results[0], str(one))
    plot.plot_results(results, str(many))
    w1, _ = assert_png(one)
    wn, _ = assert_png(many)
    assert wn > w1  # panels side by side


def test_svg_and_describe(tmp_path: Path) -> None:
    out = tmp_path / "chart.svg"
    plot.plot_result(latency(), str(out))
    assert out.read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert plot.describe(latency()) == "reqrep: 64 B payload, 1,000 round trips"
    assert plot.describe(throughput()) == "pushpull: 64 B payload, 20,000 messages"


@pytest.mark.parametrize("bad,match", [
    ([1, 2], "expected a JSON object"),
    ({"size": 64, "messages": 3}, "no workload"),
    ({"workload": "pushpull", "size": 64, "messages": 3}, "numeric 'msgs_per_s'"),
    ({"workload": "reqrep", "size": 64, "messages": 3, "p50_us": 1.0}, "numeric 'p99_us'"),
    ({"workload": "pushpull", "size": 64, "messages": 3, "msgs_per_s": 1.0, "baselines": []},
     "'baselines' should be an object"),
])
def test_not_a_result_is_refused(tmp_path: Path, bad: Any, match: str) -> None:
    with pytest.raises(plot.PlotError, match=match):
        plot.plot_results([bad], str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()


def test_no_results_and_bad_output(tmp_path: Path) -> None:
    with pytest.raises(plot.PlotError, match="no results"):
        plot.plot_results([], str(tmp_path / "x.png"))
    with pytest.raises(plot.PlotError, match=r"must end in \.png"):
        plot.plot_result(throughput(), str(tmp_path / "x.jpg"))
    with pytest.raises(plot.PlotError, match="does not exist"):
        plot.plot_result(throughput(), str(tmp_path / "nope" / "x.png"))


# ---------------------------------------------------------------------------- the command


def test_cli_from_saved_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = save(tmp_path, "a.json", throughput())
    b = save(tmp_path, "b.json", latency())
    out = tmp_path / "both.png"
    assert main(["bench", "--plot", str(out), "--from", a, b, "--json"]) == 0
    assert_png(out, min_width=800)
    cap = capsys.readouterr()
    assert json.loads(cap.out) == {"plot": str(out), "from": [a, b]}
    assert "2 result(s)" in cap.err


def test_cli_measure_then_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from a3m.benchmarks import registry

    calls: list[tuple[str, int, int]] = []

    def fake_run_bench(name: str, size: int, messages: int, progress: Any,
                       baselines: bool = True, placement: str = "free", batch: int = 0, cookies: bool = False,
                       count: bool = False, busy_poll_s: float | None = None
                       ) -> dict[str, Any]:
        calls.append((name, size, messages))
        assert placement == "spread" and batch == 0  # the CLI's defaults
        return latency(size=size, messages=messages, round_trips=messages)

    monkeypatch.setattr(registry, "run_bench", fake_run_bench)
    out = tmp_path / "rr.png"
    saved = tmp_path / "rr.json"
    assert main(["bench", "reqrep", "--messages", "500", "--plot", str(out),
                 "--out", str(saved), "--json"]) == 0
    assert calls == [("reqrep", 64, 500)]
    assert_png(out)
    printed = json.loads(capsys.readouterr().out)
    assert printed["plot"] == str(out) and printed["p50_us"] == 323.7
    assert "plot" not in json.loads(saved.read_text(encoding="utf-8"))  # --out: the measurement


@pytest.mark.parametrize("argv,match", [
    (["bench"], "give a WORKLOAD"),
    (["bench", "--from", "{a}"], "--from needs --plot"),
    (["bench", "pushpull", "--plot", "{png}", "--from", "{a}"], "not both"),
    (["bench", "--plot", "{png}", "--from", "{a}", "--out", "{a}"], "nothing is measured"),
    (["bench", "--plot", "{dir}/x.gif", "--from", "{a}"], r"must end in \.png, \.svg, \.pdf"),
    (["bench", "--plot", "{dir}/no/x.png", "--from", "{a}"], "does not exist"),
    (["bench", "--plot", "{png}", "--from", "{dir}/missing.json"], "missing.json: no such file"),
    (["bench", "--plot", "{png}", "--from", "{junk}"], "junk.json: not valid JSON"),
    (["bench", "--plot", "{png}", "--from", "{a}", "{other}"],
     "other.json: not an a3m bench result"),
    (["bench", "--plot", "{png}", "--from", "{dir}"], "is a directory"),
    (["bench", "pushpull", "--plot", "{dir}/x.txt"], r"must end in \.png"),
])
def test_cli_argument_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str], argv: list[str],
                                       match: str) -> None:
    from a3m.benchmarks import registry

    def must_not_run(*a: Any, **k: Any) -> dict[str, Any]:
        raise AssertionError("a bad --plot must be refused before measuring")

    monkeypatch.setattr(registry, "run_bench", must_not_run)
    (tmp_path / "junk.json").write_text("{not json", encoding="utf-8")
    names = {"a": save(tmp_path, "a.json", throughput()),
             "other": save(tmp_path, "other.json", {"hello": "world"}),
             "junk": str(tmp_path / "junk.json"), "png": str(tmp_path / "out.png"),
             "dir": str(tmp_path)}
    assert main([arg.format(**names) for arg in argv]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.startswith("a3m bench: ")
    assert re.search(match, cap.err), cap.err
    assert not (tmp_path / "out.png").exists()


def test_cli_unknown_workload_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nosuch", "--plot", "x.png"])
    assert exc.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
