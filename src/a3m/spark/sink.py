"""``df.writeStream.format("a3m")``: each row's ``payload`` sent to A3M sockets, a replayed
batch never sent twice.

Options (case-insensitive): ``peers`` (required, ``node/socket`` comma-separated),
``addresses`` (``node=host:port`` comma-separated, or use ``discovery``: a file of
``id,host,port`` lines), ``node`` (id prefix of the sending nodes, ``spark-out``), ``bind``
(the host to bind; each Python worker takes its own port), ``type`` (``PUSH`` or ``PUB``; PUB
reads a ``topic`` column), ``ledger`` (directory of the delivery ledger, default
``<tmp>/a3m-sink/<node>``; on a cluster it must be shared by the executors), ``timeout``
(seconds a task waits for links and for delivery, 60), ``idempotent`` (``true``: each message
in an envelope naming its task and sequence, for a receiver's
:class:`~a3m.spark.idempotent.Deduplicator`; then even a worker killed between delivering and
writing its marker delivers each row once), ``confirm`` (``true``: each row is sent with a
cookie and the task ends only once the peer application took every row; an outcome
NOT_DELIVERED or UNKNOWN, or none within ``timeout``, fails the task, so that Spark retries it;
implies ``idempotent``, which keeps each row once at a receiver that de-duplicates).

Each task sends its rows, waits until the peers' nodes acknowledged every one
(:meth:`a3m.Node.flush`), then writes a marker ``<batchId>/<partition>`` in the ledger. A task
that finds its marker (the batch is replayed after a failure or a restart) sends nothing.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from a3m.spark.idempotent import wrap

KEEP_BATCHES = 100  # ledger markers kept behind the last committed batch

_lock = threading.Lock()
_nodes: dict[tuple[str, ...], tuple[Any, Any]] = {}


def _opt(options: dict[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower(), options.get(name))
    return default if value is None else str(value)


@dataclass
class SinkCommit(WriterCommitMessage):  # type: ignore[misc]
    batch_id: int
    partition: int
    sent: int
    replayed: bool


class Ledger:
    """Markers of (batch, partition) pairs whose rows were all delivered: a local directory
    (or shared mount), or any ``pyarrow.fs`` URI (``hdfs://``, ``s3://``, ...) that every
    executor reaches."""

    def __new__(cls, directory: str | os.PathLike[str]) -> Ledger:
        if cls is Ledger and "://" in str(directory):
            return super().__new__(FsLedger)
        return super().__new__(cls)

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)

    def path(self, batch_id: int, partition: int) -> Path:
        return self.dir / f"{batch_id:012d}" / f"{partition:06d}.json"

    def done(self, batch_id: int, partition: int) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = json.loads(self.path(batch_id, partition).read_text())
            return result
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def mark(self, batch_id: int, partition: int, sent: int, complete: bool = True) -> None:
        p = self.path(batch_id, partition)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "w") as f:
            json.dump({"sent": sent, "complete": complete}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)

    def prune(self, below: int) -> None:
        if not self.dir.exists():
            return
        for d in self.dir.iterdir():
            if d.is_dir() and d.name.isdigit() and int(d.name) < below:
                for f in d.iterdir():
                    f.unlink(missing_ok=True)
                d.rmdir()


class FsLedger(Ledger):
    """The ledger on a ``pyarrow.fs`` filesystem: a marker is written under a temporary name
    and moved into place (one object written whole, on object stores)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        import pyarrow.fs as pafs

        self.fs, root = pafs.FileSystem.from_uri(str(directory))
        self.root = root.rstrip("/")
        self.dir = Path(root)

    def _key(self, batch_id: int, partition: int) -> str:
        return f"{self.root}/{batch_id:012d}/{partition:06d}.json"

    def done(self, batch_id: int, partition: int) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(self._key(batch_id, partition)) as f:
                result: dict[str, Any] = json.loads(f.read())
            return result
        except (FileNotFoundError, OSError, json.JSONDecodeError):
            return None

    def mark(self, batch_id: int, partition: int, sent: int, complete: bool = True) -> None:
        key = self._key(batch_id, partition)
        self.fs.create_dir(key.rpartition("/")[0], recursive=True)
        tmp = f"{key}.{uuid.uuid4().hex[:8]}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps({"sent": sent, "complete": complete}).encode())
        self.fs.move(tmp, key)

    def prune(self, below: int) -> None:
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError:
            return
        for info in infos:
            name = info.path.rstrip("/").rpartition("/")[2]
            if info.type == pafs.FileType.Directory and name.isdigit() and int(name) < below:
                self.fs.delete_dir(info.path)


def _row_key(row: Any) -> tuple[bytes, bytes]:
    payload = row["payload"]
    topic = row["topic"] if "topic" in getattr(row, "__fields__", ()) else None
    return (payload.encode() if isinstance(payload, str) else bytes(payload),
            b"" if topic is None else topic.encode() if isinstance(topic, str) else bytes(topic))


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


class A3MStreamWriter(DataSourceStreamWriter):  # type: ignore[misc]
    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self.peers = _split(_opt(options, "peers"))
        if not self.peers or any("/" not in p for p in self.peers):
            raise ValueError('the a3m sink needs .option("peers", "node/socket,...")')
        self.addresses: dict[str, tuple[str, int]] = {}
        for item in _split(_opt(options, "addresses")):
            nid, _, hp = item.partition("=")
            host, _, port = hp.rpartition(":")
            self.addresses[nid] = (host, int(port))
        self.discovery = _opt(options, "discovery")
        self.node = _opt(options, "node", "spark-out") or "spark-out"
        self.host = (_opt(options, "bind", "127.0.0.1:0") or "127.0.0.1:0").rpartition(":")[0]
        self.kind = (_opt(options, "type", "PUSH") or "PUSH").upper()
        if self.kind not in ("PUSH", "PUB"):
            raise ValueError("the a3m sink's type is PUSH or PUB")
        self.ledger_dir = _opt(options, "ledger") or os.path.join(
            tempfile.gettempdir(), "a3m-sink", self.node)
        self.timeout = float(_opt(options, "timeout", "60") or 60)
        flag = (_opt(options, "idempotent", "false") or "false").lower()
        if flag not in ("true", "false"):
            raise ValueError("the a3m sink's idempotent option is true or false")
        self.idempotent = flag == "true"
        confirm = (_opt(options, "confirm", "false") or "false").lower()
        if confirm not in ("true", "false"):
            raise ValueError("the a3m sink's confirm option is true or false")
        self.confirm = confirm == "true"
        if self.confirm:
            self.idempotent = True  # a retry resends rows of unknown fate: the envelope
        # A test's fault injection: "kill-after-send:<file>" makes the task that finds the
        # file delete it and SIGKILL its own Python worker after its rows were delivered and
        # before its ledger marker (the case only the idempotent envelope covers).
        self.failpoint = _opt(options, "failpoint")
        names = schema.fieldNames() if schema is not None else []
        if "payload" not in names:
            raise ValueError("the a3m sink sends a 'payload' column (binary or string)")
        if self.kind == "PUB" and "topic" not in names:
            raise ValueError("an a3m PUB sink needs a 'topic' column")

    def _socket(self) -> tuple[Any, Any]:
        """This Python worker's node and socket, linked to every peer (made once, kept)."""
        import a3m

        key = (self.node, self.host, self.kind, *self.peers)
        with _lock:
            got = _nodes.get(key)
            if got is not None:
                return got
            node = a3m.Node(f"{self.node}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
                            bind=f"{self.host}:0", discovery=self.discovery)
            for nid, addr in self.addresses.items():
                node.associate(nid, addr)
            sock = node.socket(a3m.PUB if self.kind == "PUB" else a3m.PUSH, "sink",
                               reconnect=True)  # a peer that restarts is linked again
            for peer in self.peers:
                sock.link(peer)
            for peer in self.peers:
                if not sock.wait_linked(peer, timeout=self.timeout):
                    node.close(timeout=1)
                    raise RuntimeError(f"a3m sink: could not link with {peer} "
                                       f"({sock.refusal(peer) or 'no answer'})")
            _nodes[key] = (node, sock)
            return node, sock

    def _relink(self, sock: Any) -> None:
        """Link again with peers a kept socket lost for good (a fatal refusal, such as a peer
        socket that was closing when the link was retried)."""
        import a3m

        for peer in self.peers:
            if not sock.wait_linked(peer, timeout=0):
                try:
                    sock.link(peer)
                except a3m.UsageError:
                    pass  # still closing: its retry links again
        for peer in self.peers:
            sock.wait_linked(peer, timeout=self.timeout)

    def write(self, iterator: Any) -> SinkCommit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        partition = ctx.partitionId()
        ledger = Ledger(self.ledger_dir)
        mark = ledger.done(batch_id, partition)
        if mark is not None and mark.get("complete", True):
            return SinkCommit(batch_id, partition, 0, True)  # a replay: already delivered
        skip = int(mark["sent"]) if mark else 0  # an earlier attempt delivered these first rows
        # Take every row before sending any, so a failure upstream sends nothing.
        rows = [r for r in iterator if r["payload"] is not None]
        producer = None
        if self.idempotent:
            query = ctx.getLocalProperty("sql.streaming.queryId") or "query"
            producer = f"{query}/{batch_id}/{partition}"
            rows.sort(key=_row_key)  # every attempt sends the same rows in the same order
        node, sock = self._socket()
        self._relink(sock)
        sent = skip
        attempt = uuid.uuid4().hex  # (a cached socket may still hear of earlier attempts)
        outcomes: dict[int, int] = {}  # row -> peers that took it
        try:
            for row in rows[skip:]:
                payload = row["payload"]
                if isinstance(payload, str):
                    payload = payload.encode()
                if producer is not None:
                    payload = wrap(producer, sent, bytes(payload))
                kw: dict[str, Any] = {}
                if self.confirm:
                    kw["cookie"] = (attempt, sent)
                if self.kind == "PUB":
                    topic = row["topic"]
                    kw["topic"] = (topic.encode() if isinstance(topic, str)
                                   else bytes(topic or b""))
                if self.confirm:
                    self._send_watching(sock, bytes(payload), kw, attempt, outcomes)
                else:
                    sock.send(bytes(payload), timeout=self.timeout, **kw)
                sent += 1
                if self.confirm and sent % 256 == 0:
                    self._outcomes(sock, attempt, outcomes, 0.0)  # a failure ends it early
            if not node.flush(timeout=self.timeout):
                raise RuntimeError("a3m sink: peers did not acknowledge the batch in time")
            if self.confirm:
                self._confirmed(sock, attempt, outcomes, skip, sent)
            self._failpoint()
        except BaseException:
            if self.confirm:
                # Only rows the peer application took lead the retry's skip: the others are
                # sent again (the envelope drops what a receiver already had).
                taken, need = skip, self._copies()
                while outcomes.get(taken, 0) >= need:
                    taken += 1
                ledger.mark(batch_id, partition, taken, complete=False)
                raise
            # What was handed to the node is delivered while this worker lives: record it so
            # the task's retry sends only the rest.
            node.flush(timeout=self.timeout)
            ledger.mark(batch_id, partition, sent, complete=False)
            raise
        ledger.mark(batch_id, partition, sent)
        return SinkCommit(batch_id, partition, sent - skip, False)

    def _send_watching(self, sock: Any, payload: bytes, kw: dict[str, Any], attempt: str,
                       outcomes: dict[int, int]) -> None:
        """Send one row (``timeout``), looking at the outcomes while the send waits: a row
        not delivered fails the task at once, not after the wait (its link may be gone)."""
        import time

        import a3m

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock.send(payload, timeout=min(0.5, max(0.0, deadline - time.monotonic())),
                          **kw)
                return
            except (a3m.Timeout, a3m.WouldBlock):
                self._outcomes(sock, attempt, outcomes, 0.0)
                if time.monotonic() >= deadline:
                    raise

    def _copies(self) -> int:
        """DELIVERED outcomes a row needs: one per peer for PUB, one for PUSH."""
        return len(self.peers) if self.kind == "PUB" else 1

    def _outcomes(self, sock: Any, attempt: str, outcomes: dict[int, int],
                  wait: float) -> None:
        """Collect this attempt's outcomes (waiting up to ``wait`` for the first); raise at
        the first that is not DELIVERED."""
        import a3m

        got = sock.cookies(4096)
        if not got and wait > 0:
            try:
                got = [sock.recv_cookie(timeout=wait)]
            except (a3m.Timeout, a3m.WouldBlock):
                return
        for c in got:
            if not (isinstance(c.value, tuple) and c.value[0] == attempt):
                continue  # an earlier attempt's
            index = c.value[1]
            if c.outcome == a3m.DELIVERED:
                outcomes[index] = outcomes.get(index, 0) + 1
            else:
                raise RuntimeError(f"a3m sink: row {index} was {c.outcome} at "
                                   f"{c.peer.node}/{c.peer.tag}: the task fails for a retry")

    def _confirmed(self, sock: Any, attempt: str, outcomes: dict[int, int], first: int,
                   end: int) -> None:
        """Wait until rows ``first..end-1`` are all known DELIVERED (``timeout``)."""
        import time

        deadline = time.monotonic() + self.timeout
        need = self._copies()
        while any(outcomes.get(i, 0) < need for i in range(first, end)):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sum(1 for i in range(first, end) if i not in outcomes)
                raise RuntimeError(f"a3m sink: no outcome for {missing} row(s) within "
                                   f"{self.timeout} s")
            self._outcomes(sock, attempt, outcomes, min(left, 1.0))

    def _failpoint(self) -> None:
        if self.failpoint and self.failpoint.startswith("kill-after-send:"):
            flag = self.failpoint.partition(":")[2]
            try:
                os.unlink(flag)
            except FileNotFoundError:
                return
            os.kill(os.getpid(), signal.SIGKILL)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 (Spark's name)
        Ledger(self.ledger_dir).prune(batchId - KEEP_BATCHES)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        """Markers stay: the rows they cover were delivered and must not be sent again."""
