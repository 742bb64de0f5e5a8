"""With ``reconnect=True`` a socket links again when the peer ends a link it initiated (the
peer closed its socket), as a zmq connect reconnects; its own unlink stays unlinked."""

from __future__ import annotations

import threading

import a3m


def test_push_links_again_after_the_pull_socket_is_reopened() -> None:
    with a3m.Node("prod-r") as prod, a3m.Node("coll-r") as coll:
        prod.associate("coll-r", coll.address)
        pull = coll.socket(a3m.PULL, "events")
        push = prod.socket(a3m.PUSH, "out", retry_base_s=0.02, retry_max_s=0.2, reconnect=True)
        push.link("coll-r/events")
        assert push.wait_linked(timeout=5)
        got: list[bytes] = []

        def send() -> None:
            for i in range(2000):
                push.send(b"%d" % i, timeout=30)

        t = threading.Thread(target=send)
        t.start()
        while len(got) < 500:
            got.append(pull.recv(timeout=5))
        pull.close(timeout=5)  # the peer ends the link; what was in flight still arrives
        while True:
            try:
                got.append(pull.recv(timeout=0))
            except (a3m.WouldBlock, a3m.Closed):
                break
        pull = coll.socket(a3m.PULL, "events")  # back under the same name
        while len(got) < 2000:
            got.append(pull.recv(timeout=10))
        t.join(10)
        assert sorted(int(x) for x in got) == list(range(2000))


def test_no_relink_after_an_unlink_the_application_asked_for() -> None:
    with a3m.Node("prod-u") as prod, a3m.Node("coll-u") as coll:
        prod.associate("coll-u", coll.address)
        coll.socket(a3m.PULL, "events")
        push = prod.socket(a3m.PUSH, "out", retry_base_s=0.02, retry_max_s=0.2, reconnect=True)
        push.link("coll-u/events")
        assert push.wait_linked(timeout=5)
        push.unlink("coll-u/events")
        assert not push.wait_linked(timeout=1.0)
        assert push.links == []
