//! Batched UDP I/O on a socket the caller owns: `recvmmsg` with GRO splitting (quinn-udp),
//! sends grouped into GSO transmits (quinn-udp) or `sendmmsg` runs.
//!
//! The twin is `a3m/runtime/offload.py` (`UdpOffload`: one `recvfrom` / `sendto` or a Python
//! `sendmsg` with `UDP_SEGMENT` a call). Each datagram stays what the protocol made; only the
//! system calls change. Support is probed at start (quinn-udp: `UDP_SEGMENT`, `UDP_GRO`) and
//! GSO goes off for the socket at the first refusal, as in the twin.

use std::io::{self, IoSliceMut};
use std::mem::{self, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState, BATCH_SIZE};

/// Room for one read: any UDP datagram, or one GRO-coalesced run.
pub const SLOT_BYTES: usize = 65536;
/// Most bytes one segmented send carries (as the twin's GSO_MAX_BYTES).
pub const GSO_MAX_BYTES: usize = 65000;
/// Most segments one segmented send carries.
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most datagrams one `sendmmsg` carries.
pub const MMSG_MAX: usize = 64;

/// Counters of one socket's batched I/O (system calls and what they carried).
#[derive(Default)]
pub struct Counters {
    pub recv_calls: AtomicU64,
    pub recv_datagrams: AtomicU64,
    pub gro_reads: AtomicU64,
    pub send_calls: AtomicU64,
    pub send_datagrams: AtomicU64,
    pub gso_sends: AtomicU64,
    pub gso_datagrams: AtomicU64,
    pub send_errors: AtomicU64,
    pub recv_errors: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A datagram read: `len` bytes at `start` of the arena, from `addr`.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub start: usize,
    pub len: usize,
    pub addr: SocketAddr,
}

/// Receive buffers: `BATCH_SIZE` slots of `SLOT_BYTES`, reused across reads (one per thread
/// in the bindings).
pub struct RecvArena {
    pub buf: Vec<u8>,
    meta: Vec<RecvMeta>,
}

impl Default for RecvArena {
    fn default() -> Self {
        RecvArena { buf: vec![0u8; BATCH_SIZE * SLOT_BYTES], meta: vec![RecvMeta::default(); BATCH_SIZE] }
    }
}

/// One socket's batched I/O state; the socket itself is the caller's (a file descriptor
/// borrowed per call).
pub struct Udp {
    state: UdpSocketState,
    gso: AtomicBool,
    gro: bool,
    pub gso_refused: AtomicBool,
    pub counters: Counters,
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // A system call on a descriptor the caller keeps open.
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
    (rc == 0).then_some(v)
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: a system call on a descriptor the caller keeps open; `v` lives across it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

impl Udp {
    /// Set up batched I/O on `fd` (a UDP socket): GSO if `gso` and the kernel has it, GRO
    /// likewise. The socket's other options are left as they were (quinn-udp's set-up turns
    /// on packet info, TOS, timestamps and "don't fragment": the last two are put back).
    pub fn new(fd: RawFd, gso: bool, gro: bool) -> io::Result<Udp> {
        // SAFETY: the caller keeps `fd` open for this call (the bindings hold the socket).
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let mtu4 = getsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER);
        let mtu6 = getsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER);
        let state = UdpSocketState::new(UdpSockRef::from(&bfd))?;
        if let Some(v) = mtu4 {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, v);
        }
        if let Some(v) = mtu6 {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, v);
        }
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 0);
        let gro_on = gro && state.gro_segments() > 1;
        if !gro_on {
            setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 0);
        }
        let gso_on = gso && state.max_gso_segments() > 1;
        Ok(Udp {
            state,
            gso: AtomicBool::new(gso_on),
            gro: gro_on,
            gso_refused: AtomicBool::new(false),
            counters: Counters::default(),
        })
    }

    pub fn gso(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    pub fn gro(&self) -> bool {
        self.gro
    }

    pub fn max_gso_segments(&self) -> usize {
        if self.gso() {
            self.state.max_gso_segments().min(GSO_MAX_SEGMENTS)
        } else {
            1
        }
    }

    /// Read up to `max` datagrams (several `recvmmsg` calls of up to BATCH_SIZE reads, GRO
    /// runs cut into their datagrams), appending them to `out` with their bytes in
    /// `arena.buf` — so at most BATCH_SIZE reads a call, each at most SLOT_BYTES. Returns
    /// Ok when the queue ran dry or `max` was reached; an error other than "would block"
    /// (none read yet) is returned, later ones are counted.
    pub fn recv(&self, fd: RawFd, arena: &mut RecvArena, max: usize, out: &mut Vec<Received>) -> io::Result<()> {
        // SAFETY: the caller keeps `fd` open for this call.
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let slots = BATCH_SIZE.min(max.max(1));
        let n = {
            let mut bufs: Vec<IoSliceMut<'_>> =
                arena.buf.chunks_mut(SLOT_BYTES).take(slots).map(IoSliceMut::new).collect();
            bump(&self.counters.recv_calls, 1);
            match self.state.recv(UdpSockRef::from(&bfd), &mut bufs, &mut arena.meta[..slots]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    bump(&self.counters.recv_errors, 1);
                    return Err(e);
                }
            }
        };
        for (i, meta) in arena.meta[..n].iter().enumerate() {
            let base = i * SLOT_BYTES;
            let len = meta.len.min(SLOT_BYTES);
            let stride = if meta.stride == 0 { len } else { meta.stride };
            if stride < len {
                bump(&self.counters.gro_reads, 1);
            }
            let mut at = 0;
            while at < len {
                let seg = stride.min(len - at);
                out.push(Received { start: base + at, len: seg, addr: meta.addr });
                at += seg;
            }
            if len == 0 {
                out.push(Received { start: base, len: 0, addr: meta.addr });
            }
        }
        bump(&self.counters.recv_datagrams, out.len() as u64);
        Ok(())
    }

    /// Send `datagrams` (ranges of `data`, each with its destination) in order; returns how
    /// many failed (a full kernel buffer, an ICMP error surfacing: the protocol resends).
    pub fn send(&self, fd: RawFd, data: &[u8], datagrams: &[(usize, usize, SocketAddr)]) -> usize {
        let mut errors = 0;
        let mut i = 0;
        let max_seg = self.max_gso_segments();
        while i < datagrams.len() {
            // The run of datagrams to one address, each of the first's size (the last may be
            // shorter, and ends the run).
            let (s0, l0, a0) = datagrams[i];
            let mut j = i + 1;
            let mut total = l0;
            if max_seg > 1 && l0 > 0 {
                while j < datagrams.len() && j - i < max_seg {
                    let (s, l, a) = datagrams[j];
                    if a != a0 || l > l0 || l == 0 || total + l > GSO_MAX_BYTES || s != s0 + total {
                        break;
                    }
                    total += l;
                    j += 1;
                    if l < l0 {
                        break;
                    }
                }
            }
            if j - i > 1 {
                match self.gso_send(fd, &data[s0..s0 + total], l0, a0) {
                    Ok(()) => {
                        bump(&self.counters.gso_sends, 1);
                        bump(&self.counters.gso_datagrams, (j - i) as u64);
                        bump(&self.counters.send_datagrams, (j - i) as u64);
                        i = j;
                        continue;
                    }
                    Err(e) if refused(&e) => {
                        // Refused here: one datagram per call from now on (this run too).
                        self.gso.store(false, Ordering::Relaxed);
                        self.gso_refused.store(true, Ordering::Relaxed);
                        errors += self.send_each(fd, data, &datagrams[i..j]);
                        i = j;
                        continue;
                    }
                    Err(_) => {
                        errors += j - i;
                        bump(&self.counters.send_errors, (j - i) as u64);
                        i = j;
                        continue;
                    }
                }
            }
            // Single datagrams up to the next run that segments.
            let mut k = i + 1;
            while k < datagrams.len() && k - i < MMSG_MAX {
                if max_seg > 1 && k + 1 < datagrams.len() {
                    let (_, l, a) = datagrams[k];
                    let (_, l2, a2) = datagrams[k + 1];
                    if a == a2 && l2 <= l && l > 0 {
                        break; // k starts a segmentable run
                    }
                }
                k += 1;
            }
            errors += self.send_each(fd, data, &datagrams[i..k]);
            i = k;
        }
        errors
    }

    fn gso_send(&self, fd: RawFd, contents: &[u8], segment: usize, dest: SocketAddr) -> io::Result<()> {
        // SAFETY: the caller keeps `fd` open for this call.
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let t = Transmit { destination: dest, ecn: None, contents, segment_size: Some(segment), src_ip: None };
        bump(&self.counters.send_calls, 1);
        self.state.try_send(UdpSockRef::from(&bfd), &t)
    }

    /// `sendmmsg` the datagrams, one message each; the number that failed.
    fn send_each(&self, fd: RawFd, data: &[u8], datagrams: &[(usize, usize, SocketAddr)]) -> usize {
        let mut errors = 0;
        for chunk in datagrams.chunks(MMSG_MAX) {
            let mut names: Vec<SockAddrBuf> = chunk.iter().map(|d| SockAddrBuf::from(d.2)).collect();
            let mut iovs: Vec<libc::iovec> = chunk
                .iter()
                .map(|&(s, l, _)| libc::iovec { iov_base: data[s..s + l].as_ptr() as *mut libc::c_void, iov_len: l })
                .collect();
            // SAFETY: an all-zero mmsghdr is a valid empty message; each is filled below.
            let mut hdrs: Vec<libc::mmsghdr> = (0..chunk.len()).map(|_| unsafe { mem::zeroed() }).collect();
            for (k, h) in hdrs.iter_mut().enumerate() {
                h.msg_hdr.msg_name = names[k].as_mut_ptr();
                h.msg_hdr.msg_namelen = names[k].len;
                h.msg_hdr.msg_iov = &mut iovs[k];
                h.msg_hdr.msg_iovlen = 1;
            }
            let mut at = 0;
            while at < hdrs.len() {
                bump(&self.counters.send_calls, 1);
                // The iovecs point into `data`, borrowed for this function; the kernel only
                // reads them (and writes msg_len).
                // SAFETY: `hdrs[at..]` point into `names` and `iovs`, which outlive the call.
                let rc = unsafe {
                    libc::sendmmsg(fd, hdrs[at..].as_mut_ptr(), (hdrs.len() - at) as libc::c_uint, 0)
                };
                if rc > 0 {
                    bump(&self.counters.send_datagrams, rc as u64);
                    at += rc as usize;
                    continue;
                }
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The datagram at `at` failed (a full buffer, an ICMP error): count it, go on.
                errors += 1;
                bump(&self.counters.send_errors, 1);
                at += 1;
            }
        }
        errors
    }
}

fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EMSGSIZE) | Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
    )
}

/// A socket address in the kernel's layout.
struct SockAddrBuf {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl SockAddrBuf {
    fn as_mut_ptr(&mut self) -> *mut libc::c_void {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

impl From<SocketAddr> for SockAddrBuf {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: an all-zero sockaddr_storage is valid; the family's fields are set below.
        let mut storage: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
        let len = match addr {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let sin = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) };
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_flowinfo = a.flowinfo().to_be();
                sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
                sin6.sin6_scope_id = a.scope_id();
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        SockAddrBuf { storage, len: len as libc::socklen_t }
    }
}

/// Parse a numeric host and port as Python's socket module takes them (IPv6 with flow info
/// and scope id); None for a name to resolve.
pub fn parse_addr(host: &str, port: u16, flowinfo: u32, scope_id: u32) -> Option<SocketAddr> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Some(SocketAddr::V4(SocketAddrV4::new(ip, port)));
    }
    let ip: Ipv6Addr = host.parse().ok()?;
    Some(SocketAddr::V6(SocketAddrV6::new(ip, port, flowinfo, scope_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_batch_goes_and_comes_back_in_order() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let utx = Udp::new(tx.as_raw_fd(), true, false).unwrap();
        let urx = Udp::new(rx.as_raw_fd(), false, true).unwrap();
        let mut data = Vec::new();
        let mut dgrams = Vec::new();
        for i in 0..100u32 {
            let len = if i % 10 == 9 { 700 } else { 1400 };
            let start = data.len();
            data.extend(std::iter::repeat_n((i % 251) as u8, len));
            dgrams.push((start, len, to));
        }
        assert_eq!(utx.send(tx.as_raw_fd(), &data, &dgrams), 0);
        let mut arena = RecvArena::default();
        let mut got: Vec<Vec<u8>> = Vec::new();
        for _ in 0..1000 {
            let mut out = Vec::new();
            urx.recv(rx.as_raw_fd(), &mut arena, 64, &mut out).unwrap();
            for r in out {
                assert_eq!(r.addr, tx.local_addr().unwrap());
                got.push(arena.buf[r.start..r.start + r.len].to_vec());
            }
            if got.len() == 100 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.len(), 100);
        for (i, (d, &(s, l, _))) in got.iter().zip(&dgrams).enumerate() {
            assert_eq!(d.as_slice(), &data[s..s + l], "datagram {i}");
        }
    }

    #[test]
    fn numeric_addresses_parse_as_python_gives_them() {
        assert_eq!(parse_addr("127.0.0.1", 5, 0, 0), Some("127.0.0.1:5".parse().unwrap()));
        assert_eq!(parse_addr("::1", 5, 0, 0), Some("[::1]:5".parse().unwrap()));
        assert_eq!(parse_addr("localhost", 5, 0, 0), None);
    }
}
