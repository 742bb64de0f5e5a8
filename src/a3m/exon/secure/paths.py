"""Paths (mobility): a session's peer seen at a new address is sent a CHALLENGE there, and
moves only once it answers (``docs/exon-wire.md``, "Secure associations"); until then what
is sent toward the candidate address is bounded by 3x what came from it (amplification).
"""

from __future__ import annotations

from a3m.exon.secure import packets as p
from a3m.exon.secure.session import Session
from a3m.exon.secure.state import Address, SecureState


class PathsPart(SecureState):
    """Moves a session to the address its peer proved."""

    def _moved(self, s: Session, addr: Address, newest: bool, n: int, now: float) -> None:
        """An authenticated datagram from an address other than the proven one."""
        if not newest:
            self.stats.old_path_datagrams += 1  # reordered: it moves nothing
            return
        if addr == s.candidate:
            s.budget += 3 * n
            return
        s.candidate = addr
        s.budget = 3 * n
        s.challenge = self._entropy(p.CHALLENGE_BYTES)
        s.challenge_tries = 0
        self._challenge(s, now)

    def _challenge(self, s: Session, now: float) -> None:
        assert s.candidate is not None
        pkt = self._seal(s, p.CHALLENGE, s.challenge, now)
        s.budget -= len(pkt)
        s.challenge_tries += 1
        self.stats.path_challenges += 1
        self._control.append((pkt, s.candidate))
        self._arm(s, now + min(self._timeout * 2 ** (s.challenge_tries - 1),
                               self._backoff_cap))

    def _validated(self, s: Session, now: float) -> None:
        addr = s.candidate
        s.addr = addr
        s.candidate = None
        s.budget = 0
        self.stats.paths_validated += 1
        if self._current.get(s.peer) is s:
            self._on_path(s.peer, addr)
