//! The batched runs of [`Fuzz::run`] and the memory figure they watch: `used_memory` less
//! the clients' buffers, once the server is idle, must not grow over thousands of
//! iterations. Also the module temp-client pool's warm-up, which would read as growth.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::cmd;
use crate::common::memory::used_memory_less_clients;
use crate::common::*;
use crate::restore::fuzz_server::Fuzz;
use crate::restore::{BATCH, MAX_NEW_HIGHS, MEMORY_NOISE, NEW_HIGH};
use redis::Value;

impl Fuzz {
    /// Blocks `n` clients in `LOCK.ACQUIRE … WAIT` at once, then answers them all (a `DEL`
    /// of the key answers its waiters null) and closes them.
    pub(crate) fn saturate_temp_clients(&mut self, n: usize) {
        assert!(acquire(&mut self.con, "saturate", "holder", 60_000).is_some());
        let mut socks: Vec<TcpStream> = (0..n)
            .map(|i| {
                let mut s = TcpStream::connect(("127.0.0.1", self.server.port)).unwrap();
                let tok = format!("w{i:02}");
                let req = format!(
                    "*6\r\n$12\r\nLOCK.ACQUIRE\r\n$8\r\nsaturate\r\n$3\r\n{tok}\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n"
                );
                s.write_all(req.as_bytes()).unwrap();
                s
            })
            .collect();
        let con = &mut self.con;
        assert!(
            wait_until(Duration::from_secs(30), || {
                info(con, "saturate").is_some_and(|i| i.waiters == n as i64)
            }),
            "{n} waiters did not queue"
        );
        cmd!(&mut self.con, "DEL", "saturate").unwrap();
        for s in socks.iter_mut() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"$-1\r\n", "a waiter of a deleted key is answered null");
        }
    }

    pub(crate) fn await_clients(&mut self, n: usize) {
        let want = n.to_string();
        let mut clients = None;
        let con = &mut self.con;
        // (Closed connections take a moment to be noticed, longer under valgrind.)
        wait_until(Duration::from_secs(30), || {
            clients = info_field(con, "clients", "connected_clients");
            clients.as_deref() == Some(want.as_str())
        });
        if clients.as_deref() != Some(want.as_str()) {
            let list = cmd!(&mut self.con, "CLIENT", "LIST");
            panic!("{clients:?} clients connected, expected {n}: {list:?}");
        }
    }

    /// `FLUSHALL`, then the memory figure once the server is idle again.
    fn settled_memory(&mut self) -> i64 {
        assert_eq!(cmd!(&mut self.con, "FLUSHALL"), Ok(Value::Okay));
        self.await_clients(1);
        used_memory_less_clients(&mut self.con)
    }

    /// The settled memory figure once it holds still for over a second: the server frees
    /// some start-up allocations on its first cron runs (module temp clients beyond the
    /// pool's 8 spare ones).
    fn stable_memory(&mut self) -> i64 {
        let mut last = self.settled_memory();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(1_200));
            let now = self.settled_memory();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    /// Runs `iters` iterations of `one` in batches of `BATCH` with `FLUSHALL` between them;
    /// the first batch warms up. Then the memory figure must end within `MEMORY_NOISE` of
    /// where it started, and make at most `MAX_NEW_HIGHS` new highs on the way (a leak, even
    /// of a few bytes on some iterations, makes one after almost every batch).
    pub(crate) fn run(&mut self, iters: u64, mut one: impl FnMut(&mut Fuzz, u64)) {
        let t0 = Instant::now();
        let warm = BATCH.min(iters);
        for i in 0..warm {
            one(self, i);
        }
        let before = self.stable_memory();
        let mut figures = vec![before];
        let mut i = warm;
        while i < iters {
            let end = (i + BATCH).min(iters);
            while i < end {
                one(self, i);
                i += 1;
            }
            figures.push(self.settled_memory());
            self.server.assert_alive();
        }
        let mut after = *figures.last().unwrap();
        if after - before > MEMORY_NOISE {
            // Spare module temp clients beyond 8 are freed by the next cron runs.
            after = self.stable_memory();
            figures.push(after);
        }
        let new_highs = (1..figures.len())
            .filter(|&n| figures[n] > figures[..n].iter().max().unwrap() + NEW_HIGH)
            .count();
        println!(
            "  {iters} iterations in {:.1?}: {:?}\n  memory (used_memory - mem_clients_normal) \
             after each batch of {BATCH}: {figures:?}: {before} -> {after} ({:+} bytes, \
             {new_highs} new highs)",
            t0.elapsed(),
            self.tally,
            after - before
        );
        assert!(
            after - before <= MEMORY_NOISE && new_highs <= MAX_NEW_HIGHS,
            "memory grew by {} bytes over {} iterations, with {new_highs} new highs: {figures:?}",
            after - before,
            iters - warm
        );
        self.server.assert_alive();
        assert_eq!(
            cmd!(&mut self.con, "PING"),
            Ok(Value::SimpleString("PONG".into()))
        );
    }
}
