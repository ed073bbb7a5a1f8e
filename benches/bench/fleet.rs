//! Many connections read by one thread (workload 12): non-blocking sockets in one epoll set,
//! each reply's arrival stamped by the kernel. A socket with `SO_TIMESTAMPNS` hands
//! `recvmsg` the time its data was queued to it (`CLOCK_REALTIME`), so the time of the last
//! of 1,000 replies is when it reached the client machine's socket, however long the bench
//! took to get round to reading it; the time the bench read it is kept beside, to show how
//! far behind the reading thread was.

#[allow(unused_imports)]
use crate::*;

use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `SO_TIMESTAMPNS` (`SCM_TIMESTAMPNS` in the control message) on Linux (asm-generic and x86;
/// the `libc` crate does not export it for every target).
const SO_TIMESTAMPNS: libc::c_int = 35;

/// How long a collection may wait for its replies before the run fails.
const COLLECT_LIMIT: Duration = Duration::from_secs(60);

/// `CLOCK_REALTIME` in ns: the clock of the kernel's receive timestamps.
pub(crate) fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Raises this process's soft limit of open files to at least `needed` (servers started from
/// now on inherit it); fails the run when the hard limit is lower.
pub(crate) fn raise_open_files(needed: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write to.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(rc, 0, "getrlimit(RLIMIT_NOFILE)");
    if lim.rlim_cur >= needed {
        return;
    }
    assert!(
        lim.rlim_max >= needed,
        "open files: {needed} needed, hard limit {} (raise it: ulimit -Hn)",
        lim.rlim_max
    );
    lim.rlim_cur = needed;
    // SAFETY: `lim` is a valid rlimit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    assert_eq!(rc, 0, "setrlimit(RLIMIT_NOFILE, {needed})");
}

/// When one reply arrived, both in `CLOCK_REALTIME` ns.
#[derive(Clone, Copy, Default)]
pub(crate) struct Arrival {
    /// When its last bytes were queued to the socket (the kernel's receive timestamp).
    pub(crate) kernel: i64,
    /// When the bench had read it.
    pub(crate) read: i64,
}

struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
    /// The unread bytes are `buf[..end]`.
    end: usize,
    /// The kernel timestamp of the last bytes read.
    stamp: i64,
    /// Whether a reply is expected (`expect`) and not yet read.
    waiting: bool,
    /// The last reply read.
    last: Vec<u8>,
    arrival: Arrival,
}

/// Connections to one server, read together.
pub(crate) struct Fleet {
    ep: OwnedFd,
    peers: Vec<Peer>,
    /// Busy-poll (`epoll_wait` without sleeping) rather than sleep until a reply comes: for a
    /// client with a CPU of its own (pinned), as `Pipe::spinning`.
    spin: bool,
    events: Vec<libc::epoll_event>,
    /// Peers still waiting in the current collection.
    pending: usize,
}

impl Fleet {
    /// `n` connections to `srv`, each checked with a `PING`.
    pub(crate) fn open(srv: &Server, n: usize, spin: bool) -> Fleet {
        // SAFETY: plain syscall; the descriptor it returns is owned below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            ep >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `ep` is a descriptor this process just opened and nothing else owns.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let mut fleet = Fleet {
            ep,
            peers: Vec::with_capacity(n),
            spin,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 1024],
            pending: 0,
        };
        for i in 0..n {
            let s = TcpStream::connect(("127.0.0.1", srv.port)).expect("connect to redis-server");
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
            let fd = s.as_raw_fd();
            let on: libc::c_int = 1;
            // SAFETY: `on` is a c_int of the size passed.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    SO_TIMESTAMPNS,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: both descriptors are open; `ev` is valid for the call.
            let rc =
                unsafe { libc::epoll_ctl(fleet.ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
            assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
            fleet.peers.push(Peer {
                s,
                buf: vec![0; 4096],
                end: 0,
                stamp: 0,
                waiting: false,
                last: Vec::new(),
                arrival: Arrival::default(),
            });
        }
        let mut ping = Vec::new();
        push_cmd(&mut ping, &["PING"]);
        fleet.send(0..n, &ping);
        let bad = fleet.collect(0..n, |_, r| r == b"+PONG\r\n");
        assert_eq!(bad, 0, "PING on {n} connections");
        fleet
    }

    pub(crate) fn len(&self) -> usize {
        self.peers.len()
    }

    /// Writes `cmds` on each connection of `peers`.
    pub(crate) fn send(&mut self, peers: std::ops::Range<usize>, cmds: &[u8]) {
        for p in &mut self.peers[peers] {
            let mut rest = cmds;
            let began = Instant::now();
            while !rest.is_empty() {
                match p.s.write(rest) {
                    Ok(n) => rest = &rest[n..],
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        assert!(
                            began.elapsed() < COLLECT_LIMIT,
                            "redis-server reads nothing"
                        );
                        thread::yield_now();
                    }
                    Err(e) => panic!("write to redis-server: {e}"),
                }
            }
        }
    }

    /// Marks one reply as expected on each connection of `peers` (read by `wait`).
    pub(crate) fn expect(&mut self, peers: std::ops::Range<usize>) {
        for p in &mut self.peers[peers] {
            assert!(!p.waiting, "a reply is already expected");
            p.waiting = true;
            self.pending += 1;
        }
    }

    /// Reads until every expected reply has come; `ok(i, reply)` judges each (its whole
    /// bytes). Returns how many it did not accept. Bytes after an expected reply stay for the
    /// next one.
    pub(crate) fn wait(&mut self, mut ok: impl FnMut(usize, &[u8]) -> bool) -> u64 {
        let mut bad = 0;
        // Replies already read with an earlier one.
        for i in 0..self.peers.len() {
            if self.peers[i].waiting {
                bad += self.take(i, &mut ok);
            }
        }
        let began = Instant::now();
        while self.pending > 0 {
            let timeout = if self.spin { 0 } else { 100 };
            let cap = self.events.len() as libc::c_int;
            // SAFETY: `events` has room for `cap` events.
            let n = unsafe {
                libc::epoll_wait(self.ep.as_raw_fd(), self.events.as_mut_ptr(), cap, timeout)
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "epoll_wait: {e}");
                continue;
            }
            if n == 0 {
                assert!(
                    began.elapsed() < COLLECT_LIMIT,
                    "{} of the expected replies missing after {COLLECT_LIMIT:?}",
                    self.pending
                );
                if self.spin {
                    thread::yield_now();
                }
                continue;
            }
            for k in 0..n as usize {
                let i = self.events[k].u64 as usize;
                self.read(i);
                if self.peers[i].waiting {
                    bad += self.take(i, &mut ok);
                }
            }
        }
        bad
    }

    /// `expect` then `wait`.
    pub(crate) fn collect(
        &mut self,
        peers: std::ops::Range<usize>,
        ok: impl FnMut(usize, &[u8]) -> bool,
    ) -> u64 {
        self.expect(peers);
        self.wait(ok)
    }

    /// One command on connection `i` alone, and its reply's bytes.
    pub(crate) fn call(&mut self, i: usize, args: &[&str]) -> Vec<u8> {
        let mut cmd = Vec::new();
        push_cmd(&mut cmd, args);
        self.send(i..i + 1, &cmd);
        self.collect(i..i + 1, |_, _| true);
        self.peers[i].last.clone()
    }

    /// Connection `i`'s last expected reply.
    pub(crate) fn last(&self, i: usize) -> &[u8] {
        &self.peers[i].last
    }

    /// When connection `i`'s last expected reply arrived.
    pub(crate) fn arrival(&self, i: usize) -> Arrival {
        self.peers[i].arrival
    }

    /// Reads what connection `i` has (one `recvmsg`, with the kernel's timestamp).
    fn read(&mut self, i: usize) {
        let p = &mut self.peers[i];
        if p.end == p.buf.len() {
            p.buf.resize(p.buf.len() * 2, 0);
        }
        let mut iov = libc::iovec {
            // SAFETY: `end` is within `buf`.
            iov_base: unsafe { p.buf.as_mut_ptr().add(p.end) }.cast(),
            iov_len: p.buf.len() - p.end,
        };
        // Room for a few control messages, aligned for `cmsghdr`.
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is a valid empty one.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let fd: RawFd = p.s.as_raw_fd();
        // SAFETY: `msg` points at `iov` (inside `buf`) and `control`, both live and writable.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => return,
                _ => panic!("read from redis-server: {e}"),
            }
        }
        assert!(n > 0, "redis-server closed the connection");
        p.end += n as usize;
        // SAFETY: `msg` was filled by recvmsg; the CMSG_* walk stays within `control`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                    let ts: libc::timespec =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    p.stamp = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }

    /// Takes connection `i`'s expected reply if it is all there: judges it, stamps it.
    fn take(&mut self, i: usize, ok: &mut impl FnMut(usize, &[u8]) -> bool) -> u64 {
        let p = &mut self.peers[i];
        let Some(len) = reply_len(&p.buf[..p.end]) else {
            return 0;
        };
        p.last.clear();
        p.last.extend_from_slice(&p.buf[..len]);
        p.buf.copy_within(len..p.end, 0);
        p.end -= len;
        p.waiting = false;
        p.arrival = Arrival {
            kernel: p.stamp,
            read: realtime_ns(),
        };
        self.pending -= 1;
        u64::from(!ok(i, &p.last))
    }
}
