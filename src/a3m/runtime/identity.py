"""Where a node's long-term key comes from: given, a key file, beside the clock file, the
user's key directory (a node with an id of its choosing), or fresh for this process only."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from a3m.errors import UsageError
from a3m.exon.secure import NodeKey

HEADER = "a3m-x25519-private-key"
_SAFE = re.compile(r"[A-Za-z0-9._-]{1,100}")
log = logging.getLogger("a3m.identity")


def state_dir() -> Path:
    """Where nodes keep their keys by default: ``$A3M_STATE_DIR``, else
    ``$XDG_STATE_HOME/a3m``, else ``~/.local/state/a3m``."""
    env = os.environ.get("A3M_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "a3m"


def default_key_path(node_id: str) -> Path:
    """The key file of a node named ``node_id`` in the user's key directory."""
    if _SAFE.fullmatch(node_id) and not node_id.startswith("."):
        name = node_id
    else:
        name = "id-" + node_id.encode("utf-8").hex()[:200]
    return state_dir() / "keys" / f"{name}.key"


def load_or_create_key(path: str | os.PathLike[str]) -> NodeKey:
    """The key in ``path``; a new one is written there (mode 0600, atomically) if it is missing."""
    p = Path(path)
    try:
        text = p.read_text(encoding="ascii")
    except FileNotFoundError:
        key = NodeKey.generate(os.urandom)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{HEADER} {key.private.hex()}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, p)  # first writer wins: two processes starting at once agree
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        return load_or_create_key(p)
    parts = text.split()
    if len(parts) != 2 or parts[0] != HEADER:
        raise UsageError(f"{p} is not an A3M key file")
    try:
        return NodeKey(bytes.fromhex(parts[1]))
    except ValueError as exc:
        raise UsageError(f"{p} holds a damaged key") from exc


def node_key(key: Any, key_file: str | os.PathLike[str] | None,
             clock_file: str | os.PathLike[str] | None, node_id: str | None = None
             ) -> NodeKey:
    """The node's key: ``key`` (a NodeKey or 32 private bytes), else ``key_file``, else a file
    beside ``clock_file`` (``<clock_file>.key``), else, for a node named by its application
    (``node_id``), its file in the user's key directory (:func:`default_key_path`), so that
    the node keeps its identity across restarts as an SSH host does; else (a generated id) a
    fresh key for this process only."""
    if key is not None:
        if key_file is not None:
            raise UsageError("give key or key_file, not both")
        return key if isinstance(key, NodeKey) else NodeKey(bytes(key))
    if key_file is not None:
        return load_or_create_key(key_file)
    if clock_file is not None:
        return load_or_create_key(f"{os.fspath(clock_file)}.key")
    if node_id is not None:
        path = default_key_path(node_id)
        try:
            return load_or_create_key(path)
        except OSError as exc:
            log.warning("cannot keep the key of node %r in %s (%s): its key lasts for this "
                        "process only", node_id, path, exc)
    return NodeKey.generate(os.urandom)


def warn_key_refused(node_id: str) -> Callable[[str, bytes], None]:
    """A handler for refused keys that says what happened and what to do about it, once per
    peer and key (the refused side keeps trying: its handshakes are refused every time)."""
    said: set[tuple[str, bytes]] = set()

    def warn(peer: str, key: bytes) -> None:
        if (peer, key) in said or len(said) > 1024:
            return
        said.add((peer, key))
        log.warning("node %r refused a handshake as %r: key %s is not the one pinned for it or "
                    "first seen with it (a different node, or %r lost its key file); pin the "
                    "right key with associate(..., public_key=...)", node_id, peer, key.hex(),
                    peer)

    return warn
