"""``a3m send`` and ``a3m recv``: talk to A3M sockets from the shell, in the spirit of nngcat.

``a3m recv`` opens a node with one socket (PULL by default; SUB, REP, ROUTER, PAIR, BUS,
RESPONDENT, DEALER...) and prints what arrives; a REP, ROUTER or RESPONDENT answers each
message (``--reply DATA``, or ``--echo``). ``a3m send`` opens a node with one socket (PUSH by
default; PUB, REQ, DEALER, PAIR, BUS, SURVEYOR...), links it to ``--link NODE/TAG`` and sends the
``--data`` arguments, the lines of ``--file``, or the lines of standard input; a REQ, DEALER or
SURVEYOR prints the replies. Both print one message per line: ``raw`` bytes, ``quoted``
(Python-style escapes, one line each) or ``json`` (``{"source", "payload", "topic"}``, payload
as text when it is UTF-8, else ``payload_b64``). Progress, errors and the node's events (links
up and down, refusals, peers unreachable or restarted: ``a3m.NodeEvent``) go to standard
error.

    terminal 1:  a3m recv --node sink --bind 127.0.0.1:7400 --tag in --format json
    terminal 2:  echo hello | a3m send --peer sink=127.0.0.1:7400 --link sink/in
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

REPLYING = {"REP", "ROUTER", "RESPONDENT"}
ASKING = {"REQ", "DEALER", "SURVEYOR"}
FORMATS = ("raw", "quoted", "json")


def _common(p: argparse.ArgumentParser, kind: str, default_tag: str) -> None:
    p.add_argument("--type", default=kind, type=str.upper, metavar="KIND",
                   help=f"socket kind (default {kind})")
    p.add_argument("--node", help="this node's id (default: a fresh one)")
    p.add_argument("--bind", default="127.0.0.1:0", help="HOST:PORT to bind (default "
                   "127.0.0.1:0)")
    p.add_argument("--tag", default=default_tag, help=f"this socket's tag (default "
                   f"{default_tag})")
    p.add_argument("--peer", action="append", default=[], metavar="NODE=HOST:PORT",
                   help="where a node is (repeatable)")
    p.add_argument("--link", action="append", default=[], metavar="NODE/TAG",
                   help="link this socket to a peer socket (repeatable)")
    p.add_argument("--count", type=int, default=0, help="stop after this many messages "
                   "(0: no limit)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="give up after S seconds without progress (default: wait)")
    p.add_argument("--format", choices=FORMATS, default="raw", help="how messages are "
                   "printed (default raw)")
    p.add_argument("--topic", action="append", default=[],
                   help="SUB: subscribe (repeatable; none = everything); PUB: the topic to "
                        "send on")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a socket option (integers and floats are converted)")
    p.add_argument("--pin", action="append", default=[], metavar="NODE=KEY",
                   help="only this public key (64 hex digits, `a3m key NODE`) may speak as "
                        "NODE (repeatable)")
    p.add_argument("--key-file", help="this node's key file (default: the user's key "
                   "directory when --node is given, else a key for this run only)")
    p.add_argument("--insecure", action="store_true", help="no encryption nor "
                   "authentication (the peer must opt out too): trusted networks only")


def add_send_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, "PUSH", "cat")
    p.add_argument("--data", action="append", default=[], help="a message (repeatable); "
                   "without --data or --file, each line of standard input is one")
    p.add_argument("--file", help="send each line of this file ('-': standard input)")
    p.add_argument("--interval", type=float, default=0.0, metavar="S",
                   help="pause between messages")
    p.add_argument("--confirm", action="store_true", help="send each message with a cookie "
                   "and print what became of it (delivered: the peer application took it; "
                   "not delivered; unknown); exit 1 unless every one was delivered")
    p.add_argument("--confirm-timeout", type=float, default=30.0, metavar="S",
                   help="with --confirm: how long to wait for the outcomes (default 30)")
    p.add_argument("--link-timeout", type=float, default=10.0, metavar="S",
                   help="how long to wait for the links (default 10)")


def add_recv_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, "PULL", "cat")
    p.add_argument("--reply", help="REP/ROUTER/RESPONDENT: answer each message with this")
    p.add_argument("--echo", action="store_true", help="REP/ROUTER/RESPONDENT: answer each "
                   "message with itself")


def _option_value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _open(args: argparse.Namespace) -> tuple[Any, Any]:
    import a3m

    node = a3m.Node(args.node, bind=args.bind, key_file=args.key_file,
                    secure=not args.insecure)
    try:
        pins: dict[str, str] = {}
        for spec in args.pin:
            name, eq, key = spec.partition("=")
            if not name or not eq:
                raise a3m.UsageError(f"--pin wants NODE=KEY, not {spec!r}")
            pins[name] = key
        for spec in args.peer:
            name, _, where = spec.partition("=")
            host, _, port = where.rpartition(":")
            if not name or not host or not port.isdigit():
                raise a3m.UsageError(f"--peer wants NODE=HOST:PORT, not {spec!r}")
            node.associate(name, (host, int(port)), pins.pop(name, None))
        if pins:
            raise a3m.UsageError(f"--pin {next(iter(pins))}=...: give its address with --peer")
        options = {}
        for spec in args.option:
            name, eq, value = spec.partition("=")
            if not eq:
                raise a3m.UsageError(f"--option wants NAME=VALUE, not {spec!r}")
            options[name] = _option_value(value)
        sock = node.socket(args.type, args.tag, **options)
        if args.type in ("SUB", "XSUB"):
            for t in args.topic or [""]:
                sock.subscribe(t)
        for peer in args.link:
            sock.link(peer)
    except BaseException:
        node.close(timeout=1)
        raise
    print(f"[a3m] node {node.id} at {node.address[0]}:{node.address[1]}, {args.type} "
          f"socket {args.tag!r}", file=sys.stderr, flush=True)
    _print_events()
    return node, sock


def _print_events() -> None:
    """The node's events (each one a line on the ``a3m.events`` logger) on standard error."""
    log = logging.getLogger("a3m.events")
    if not any(getattr(h, "_a3m_cat", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[a3m] %(message)s"))
        handler._a3m_cat = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO)


def _open_or_say(args: argparse.Namespace, command: str) -> tuple[Any, Any] | None:
    """:func:`_open`, or None after saying why not (a misuse: exit status 2)."""
    import a3m

    try:
        return _open(args)
    except a3m.A3MError as exc:
        print(f"a3m {command}: {exc}", file=sys.stderr)
        return None


def _show(out: TextIO, fmt: str, msg: Any) -> None:
    payload: bytes = msg.payload
    if fmt == "raw":
        out.buffer.write(payload + b"\n")
        out.flush()
        return
    if fmt == "quoted":
        out.write(repr(payload)[2:-1] + "\n")
    else:
        row: dict[str, Any] = {"source": f"{msg.source[0]}/{msg.source[1]}"}
        try:
            row["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            row["payload_b64"] = base64.b64encode(payload).decode()
        if getattr(msg, "topic", None) is not None:
            row["topic"] = msg.topic.decode("utf-8", "replace")
        out.write(json.dumps(row) + "\n")
    out.flush()


def _messages(args: argparse.Namespace) -> Iterator[bytes]:
    if args.data:
        yield from (d.encode() for d in args.data)
        return
    if args.file in (None, "-"):
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n")
        return
    with open(args.file, "rb") as stream:
        for line in stream:
            yield line.rstrip(b"\r\n")


def run_send(args: argparse.Namespace) -> int:
    import a3m

    opened = _open_or_say(args, "send")
    if opened is None:
        return 2
    node, sock = opened
    sent = 0
    try:
        if args.link and not sock.wait_linked(timeout=args.link_timeout):
            print(f"a3m send: no link within {args.link_timeout} s (is the peer up, and "
                  "--peer right?)", file=sys.stderr)
            return 1
        kw: dict[str, Any] = ({"topic": args.topic[0]}
                              if args.type in ("PUB", "XPUB") and args.topic else {})
        for data in _messages(args):
            if args.confirm:
                kw["cookie"] = sent
            sock.send(data, timeout=args.timeout, **kw)
            sent += 1
            if args.type in ASKING:
                _show(sys.stdout, args.format, sock.recv_msg(timeout=args.timeout))
            if args.count and sent >= args.count:
                break
            if args.interval:
                time.sleep(args.interval)
        if not node.flush(timeout=args.timeout):
            print("a3m send: not everything was acknowledged in time", file=sys.stderr)
            return 1
        if args.confirm and not _confirm(sock, sent, args):
            return 1
    except a3m.Timeout:
        print(f"a3m send: timed out after {sent} message(s)", file=sys.stderr)
        return 1
    except a3m.A3MError as exc:
        print(f"a3m send: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        node.close(timeout=5)
    print(f"[a3m] sent {sent}", file=sys.stderr)
    return 0


def _confirm(sock: Any, sent: int, args: argparse.Namespace) -> bool:
    """Print each message's outcome as it becomes known (``N OUTCOME NODE/TAG``, or a JSON
    line with ``--format json``); True when every message was delivered. Fan-out sockets
    give one outcome per peer the message went to."""
    import a3m

    deadline = time.monotonic() + args.confirm_timeout
    seen: set[int] = set()
    good = True
    while len(seen) < sent:
        left = deadline - time.monotonic()
        try:
            c = sock.recv_cookie(timeout=max(0.0, left))
        except (a3m.Timeout, a3m.WouldBlock):
            missing = sent - len(seen)
            print(f"a3m send: no outcome for {missing} message(s) within "
                  f"{args.confirm_timeout} s", file=sys.stderr)
            return False
        seen.add(c.value)
        good = good and c.outcome == a3m.DELIVERED
        peer = f"{c.peer.node}/{c.peer.tag}"
        if args.format == "json":
            print(json.dumps({"message": c.value, "outcome": c.outcome, "peer": peer}))
        else:
            print(f"{c.value} {c.outcome.replace(' ', '-')} {peer}")
        sys.stdout.flush()
    return good


def run_recv(args: argparse.Namespace) -> int:
    import a3m

    if (args.reply is not None or args.echo) and args.type not in REPLYING:
        print(f"a3m recv: --reply/--echo need a REP, ROUTER or RESPONDENT, not {args.type}",
              file=sys.stderr)
        return 2
    opened = _open_or_say(args, "recv")
    if opened is None:
        return 2
    node, sock = opened
    got = 0
    try:
        while not args.count or got < args.count:
            msg = sock.recv_msg(timeout=args.timeout)
            got += 1
            _show(sys.stdout, args.format, msg)
            if args.type in REPLYING:
                answer = msg.payload if args.echo else (args.reply or "").encode()
                if args.type == "ROUTER":
                    sock.send(answer, to=msg.source, timeout=args.timeout)
                else:
                    sock.send(answer, timeout=args.timeout)
        node.flush(timeout=5)
    except a3m.Timeout:
        print(f"a3m recv: nothing for {args.timeout} s after {got} message(s)",
              file=sys.stderr)
        return 1 if args.count else 0
    except a3m.A3MError as exc:
        print(f"a3m recv: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        node.close(timeout=5)
    return 0
