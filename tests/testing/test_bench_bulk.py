"""``a3m bench bulk``: arguments, the veth pair's clean-up, and a short run across a real
1500-byte link when the suite runs as root (exactness, not speed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from a3m.testing.netem import NetemUnavailable, VethPath, veth_unavailable

A3M = [sys.executable, "-m", "a3m.cli.main"]
WHY = veth_unavailable()


def a3m(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*A3M, *args], capture_output=True, text=True, timeout=timeout)


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def veth_namespaces() -> set[str]:
    """The namespaces a veth path makes (`a3m-veth-*`); other runs on the machine (the
    emulator's tests, another suite) may add and remove theirs meanwhile."""
    return {line.split()[0] for line in namespaces().splitlines()
            if line.startswith("a3m-veth-")}


@pytest.mark.parametrize("args, says", [
    (("--mtu", "100"), "--mtu within 576..65535"),
    (("--size", "4"), "--size >= 8"),
    (("--messages", "1"), "--messages >= 2"),
])
def test_bad_arguments_are_refused_clearly(args: tuple[str, ...], says: str) -> None:
    r = a3m("bench", "bulk", *args)
    assert r.returncode == 2 and says in r.stderr


@pytest.mark.skipif(WHY is None, reason="runs as root here: the other tests run")
def test_without_root_it_says_so() -> None:
    r = a3m("bench", "bulk", "--size", "1024", "--messages", "10")
    assert r.returncode == 2 and "root" in r.stderr
    with pytest.raises(NetemUnavailable):
        VethPath()


@pytest.mark.skipif(WHY is not None, reason=f"needs a veth pair: {WHY}")
def test_the_namespaces_go_on_error_too() -> None:
    path = VethPath(mtu=1500)
    with pytest.raises(RuntimeError, match="boom"), path:
        assert path.ns_a in namespaces() and path.ns_b in namespaces()
        link = subprocess.run(path.argv("a", ["ip", "link"]), capture_output=True,
                              text=True).stdout
        assert "mtu 1500" in link
        raise RuntimeError("boom")
    assert path.ns_a not in namespaces() and path.ns_b not in namespaces()


@pytest.mark.skipif(WHY is not None, reason=f"needs a veth pair: {WHY}")
def test_a_short_bulk_run_over_a_1500_byte_veth_is_exact() -> None:
    """64 KiB messages across MTU 1500: each A3M message travels as ~47 fragments, each in
    its own datagram; every message arrives once (A3M secure and plain, on the native data
    plane and on its Python twins, with UDP offload (GSO and GRO) as shipped and on, pyzmq)."""
    import a3m as _a3m

    before = veth_namespaces()
    paths = "native,python" if _a3m.NATIVE else "python"
    r = a3m("bench", "bulk", "--size", "65536", "--messages", "300", "--offload", "both",
            "--paths", paths, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout)
    assert result["workload"] == "bulk" and result["mtu"] == 1500
    rows = {row["system"]: row for row in result["results"]}
    expected = {"a3m", "a3m-plain", "a3m-offload", "a3m-plain-offload"}
    if not _a3m.NATIVE:
        expected = {n + "-python" for n in expected}
    assert set(rows) >= expected | {"udp"}
    for name, row in rows.items():
        assert "error" not in row, row
        assert {"mb_per_s", "msgs_per_s"} <= row.keys(), row  # reported; the figure is the bench's
        if name == "udp":
            assert row["datagrams_in"] > 0 and row["sender"]["datagram_bytes"] == 1400
            continue
        assert row["exact"] and row["distinct"] == 300 and row["twice"] == 0, row
    a3ms = [n for n in rows if n.startswith("a3m")]
    for name in a3ms:
        assert rows[name]["path"] == ("python" if name.endswith("-python") or not _a3m.NATIVE
                                      else "native"), name
        assert rows[name]["sender"]["path"] == rows[name]["path"]
    for name in a3ms:
        snd = rows[name]["sender"]
        # a 64 KiB message is cut to fit 1400-byte datagrams: dozens of datagrams each
        assert snd["datagrams_out"] >= 300 * 40, snd
        assert rows[name]["datagrams_in"] >= 300 * 40
        assert "reqslots_sent" in snd and "slot_stalls" in snd
        assert "kernel_rcvbuf_drops" in rows[name]
    # GSO on the veth where the kernel has it: segmented sends carried the datagrams, on
    # either data plane; as shipped, the native one segments (NATIVE_OFFLOAD), the Python
    # twins do not
    from a3m.runtime.offload import NATIVE_OFFLOAD

    for name in a3ms:
        gso = rows[name]["sender"]["gso_sends"]
        if "offload" in name:
            assert gso > 0, name
        elif rows[name]["path"] == "python":
            assert gso == 0, name
        else:
            assert (gso > 0) == (NATIVE_OFFLOAD in ("on", "gso")), name
    first = "a3m" if _a3m.NATIVE else "a3m-python"
    assert f"{first}/udp" in result["ratios"]["65536"]
    assert veth_namespaces() <= before  # what the benchmark made is gone
