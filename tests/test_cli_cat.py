"""``a3m send`` / ``a3m recv`` between real processes on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

A3M = [sys.executable, "-m", "a3m.cli.main"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def receiver(*args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([*A3M, "recv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stderr is not None
    assert "[a3m] node" in p.stderr.readline()  # bound and ready
    return p


def send(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*A3M, "send", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_push_lines_of_stdin_to_a_pull_that_prints_json_lines() -> None:
    port = free_port()
    rx = receiver("--node", "sink", "--bind", f"127.0.0.1:{port}", "--tag", "in", "--format",
                  "json", "--count", "3", "--timeout", "30")
    r = send("--node", "src", "--peer", f"sink=127.0.0.1:{port}", "--link", "sink/in",
             stdin="hello\nworld\nthird line\n")
    assert r.returncode == 0, r.stderr
    out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["payload"] for row in rows] == ["hello", "world", "third line"]
    assert {row["source"] for row in rows} == {"src/cat"}
    # The node's events on standard error, both sides.
    assert "[a3m] node 'src': linked src/cat <-> sink/in" in r.stderr
    assert "[a3m] node 'sink': linked sink/in <-> src/cat" in err


def test_req_gets_each_reply_from_a_rep_that_answers() -> None:
    port = free_port()
    rx = receiver("--type", "REP", "--node", "srv", "--bind", f"127.0.0.1:{port}", "--tag",
                  "rpc", "--echo", "--count", "2", "--timeout", "30")
    r = send("--type", "REQ", "--peer", f"srv=127.0.0.1:{port}", "--link", "srv/rpc",
             "--data", "one", "--data", "tw\to", "--format", "quoted")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["one", "tw\\to"]  # quoted: one line per message
    out, _ = rx.communicate(timeout=30)
    assert out.splitlines() == ["one", "tw\to"]  # raw


def test_pub_on_a_topic_reaches_a_subscriber_of_it() -> None:
    port = free_port()
    rx = receiver("--type", "SUB", "--node", "sub", "--bind", f"127.0.0.1:{port}", "--tag",
                  "news", "--topic", "sport", "--format", "json", "--count", "2",
                  "--timeout", "30")
    r = send("--type", "PUB", "--peer", f"sub=127.0.0.1:{port}", "--link", "sub/news",
             "--topic", "sport", "--data", "goal", "--data", "match over")
    assert r.returncode == 0, r.stderr
    out, _ = rx.communicate(timeout=30)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(row["topic"], row["payload"]) for row in rows] == [("sport", "goal"),
                                                                ("sport", "match over")]


def test_mistakes_are_said_plainly() -> None:
    r = send("--peer", "nonsense", "--link", "x/y", "--data", "a")
    assert r.returncode == 2 and "NODE=HOST:PORT" in r.stderr
    t0 = time.monotonic()
    r = send("--peer", f"nobody=127.0.0.1:{free_port()}", "--link", "nobody/in",
             "--link-timeout", "1", "--data", "a")
    assert r.returncode == 1 and "no link" in r.stderr and time.monotonic() - t0 < 30
    r = subprocess.run([*A3M, "recv", "--echo"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "REP, ROUTER or RESPONDENT" in r.stderr


def test_a_pinned_key_from_a3m_key_admits_its_node_and_no_other(tmp_path: object) -> None:
    """``a3m key`` prints a node's public key; ``--pin`` makes it the only key for that id."""
    key = subprocess.run([*A3M, "key", "sink"], capture_output=True, text=True, timeout=60)
    assert key.returncode == 0 and len(key.stdout.strip()) == 64
    port = free_port()
    rx = receiver("--node", "sink", "--bind", f"127.0.0.1:{port}", "--count", "1",
                  "--timeout", "30")
    ok = send("--node", "src", "--peer", f"sink=127.0.0.1:{port}", "--link", "sink/cat",
              "--pin", f"sink={key.stdout.strip()}", "--data", "to the real sink")
    assert ok.returncode == 0, ok.stderr
    out, _ = rx.communicate(timeout=30)
    assert out == "to the real sink\n"
    rx = receiver("--node", "sink", "--bind", f"127.0.0.1:{port}", "--count", "1",
                  "--timeout", "5", "--key-file", f"{tmp_path}/other.key")  # an impostor
    refused = send("--node", "src", "--peer", f"sink=127.0.0.1:{port}", "--link", "sink/cat",
                   "--pin", f"sink={key.stdout.strip()}", "--data", "x", "--link-timeout", "2")
    assert refused.returncode != 0 and "refused a handshake as 'sink'" in refused.stderr
    rx.kill()
    rx.communicate(timeout=30)


def test_send_confirm_prints_each_outcome_and_fails_unless_all_were_taken() -> None:
    port = free_port()
    rx = receiver("--node", "ck-sink", "--bind", f"127.0.0.1:{port}", "--tag", "in",
                  "--count", "2", "--timeout", "30")
    r = send("--node", "ck-src", "--peer", f"ck-sink=127.0.0.1:{port}", "--link",
             "ck-sink/in", "--confirm", "--data", "a", "--data", "b", "--data", "c")
    rx.communicate(timeout=30)
    assert r.returncode == 1, r.stderr  # the receiver took two, then closed: c was not
    lines = sorted(r.stdout.splitlines())
    assert lines == ["0 delivered ck-sink/in", "1 delivered ck-sink/in",
                     "2 not-delivered ck-sink/in"]
    rx = receiver("--node", "ck-sink2", "--bind", f"127.0.0.1:{port}", "--tag", "in",
                  "--count", "2", "--timeout", "30")
    r = send("--node", "ck-src", "--peer", f"ck-sink2=127.0.0.1:{port}", "--link",
             "ck-sink2/in", "--confirm", "--format", "json", "--data", "a", "--data", "b")
    rx.communicate(timeout=30)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(row["message"] for row in rows) == [0, 1]
    assert {row["outcome"] for row in rows} == {"delivered"}
