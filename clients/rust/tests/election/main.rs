//! Leader election (`Election`, blocking and async) against real servers: campaign, resign
//! and the leader; a waiting candidate elected when the leader resigns or its lease ends;
//! followers that see each change through `LOCK.OBSERVE` and resume after a killed
//! connection and a restart; timeouts; a cluster. `churn` is the follower under a fleet of
//! candidate processes killed at random.

#[path = "../support/mod.rs"]
mod support;

mod churn;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::{aio, Election, Error, Leader, LossReason};
use support::{eventually, Cluster, Server, SLACK};

type Change = Result<Option<Leader>, Error>;

fn leader(l: &impl std::ops::Deref<Target = impl HasHold>) -> Leader {
    Leader {
        identity: l.token_of().to_string(),
        fence: l.fence_of(),
    }
}

/// What the tests read of a leadership, blocking or async.
trait HasHold {
    fn token_of(&self) -> &str;
    fn fence_of(&self) -> u64;
}

impl HasHold for redis_lock_client::Guard {
    fn token_of(&self) -> &str {
        self.token()
    }
    fn fence_of(&self) -> u64 {
        self.fence()
    }
}

impl HasHold for aio::Guard {
    fn token_of(&self) -> &str {
        self.token()
    }
    fn fence_of(&self) -> u64 {
        self.fence()
    }
}

/// A follower on a thread of its own: the observer's items, as they come.
fn follow(election: &Election) -> mpsc::Receiver<Change> {
    let (tx, rx) = mpsc::channel();
    let observer = election.observe();
    thread::spawn(move || {
        for change in observer {
            if tx.send(change).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next item, which must be a change (not an error) and come within 3 s.
fn change(rx: &mpsc::Receiver<Change>) -> Option<Leader> {
    match rx.recv_timeout(Duration::from_secs(3)) {
        Ok(Ok(change)) => change,
        other => panic!("expected a change: {other:?}"),
    }
}

/// The next change of an async observer, which must come within 3 s.
async fn next(observer: &mut aio::Observer) -> Option<Leader> {
    match tokio::time::timeout(Duration::from_secs(3), observer.next_change()).await {
        Ok(Ok(change)) => change,
        other => panic!("expected a change: {other:?}"),
    }
}

/// Nothing comes within `d`.
fn quiet(rx: &mpsc::Receiver<Change>, d: Duration) {
    if let Ok(item) = rx.recv_timeout(d) {
        panic!("nothing expected, got {item:?}");
    }
}

fn waiters(server: &Server, key: &str) -> u64 {
    redis_lock_client::Mutex::new(server.client(), key)
        .info()
        .unwrap()
        .map_or(0, |i| i.waiters)
}

#[test]
fn campaign_resign_leader_resp2_and_resp3() {
    let server = Server::start();
    for (n, client) in [server.client(), server.client_resp3()]
        .into_iter()
        .enumerate()
    {
        let key = format!("{{e{n}}}:leader");
        let a = Election::new(client.clone(), key.as_str()).ttl(Duration::from_secs(5));
        let b = Election::new(client.clone(), key.as_str()).with_identity("candidate-b");
        assert_ne!(a.identity(), Election::new(client.clone(), "x").identity());
        assert!(a.identity().contains(&format!(":{}:", std::process::id())));
        assert_eq!(b.identity(), "candidate-b");
        assert_eq!(a.leader().unwrap(), None);

        let la = a.campaign().unwrap();
        assert_eq!(la.identity(), a.identity());
        assert_eq!(la.token(), a.identity(), "the identity is the token");
        assert_eq!(a.leader().unwrap(), Some(leader(&la)));
        assert_eq!(b.leader().unwrap(), Some(leader(&la)), "seen alike by all");
        // One campaign at a time per candidate, clones included.
        assert!(matches!(a.clone().campaign(), Err(Error::Config(_))));
        // The leader's writes are fenced by its leadership.
        let mut set = redis::cmd("SET");
        set.arg(format!("{{e{n}}}:data")).arg("a");
        let _: () = la.guard(&set).unwrap();

        let busy = b.clone().wait(Duration::from_millis(100)).campaign();
        assert!(matches!(busy, Err(Error::Timeout)), "{busy:?}");
        let waiting = thread::spawn({
            let b = b.clone().wait(Duration::from_secs(5));
            move || b.campaign().map(|l| (Instant::now(), l))
        });
        assert!(eventually(Duration::from_secs(3), || waiters(
            &server, &key
        ) == 1));
        let resigned = Instant::now();
        let fa = la.fence();
        let signal = la.signal();
        assert!(la.resign().unwrap());
        assert!(matches!(signal.reason(), Some(LossReason::Released)));
        let (elected, lb) = waiting.join().unwrap().unwrap();
        assert!(elected - resigned < Duration::from_millis(500));
        assert!(lb.fence() > fa);
        assert_eq!(a.leader().unwrap(), Some(leader(&lb)));
        let _: () = lb.guard(&set).unwrap();

        // Dropped: resigned, and the candidate may campaign again.
        drop(lb);
        assert_eq!(a.leader().unwrap(), None);
        let again = b.campaign().unwrap();
        assert_eq!(again.identity(), "candidate-b");
        assert!(again.resign().unwrap());
    }
}

#[test]
fn the_next_candidate_is_elected_when_the_lease_ends() {
    let server = Server::start();
    let ttl = Duration::from_millis(400);
    let a = Election::new(server.client(), "lease:leader")
        .ttl(ttl)
        .no_keepalive();
    let la = a.campaign().unwrap();
    let granted = Instant::now();
    let b = Election::new(server.client(), "lease:leader").wait(Duration::from_secs(5));
    let lb = b.campaign().unwrap();
    let after = granted.elapsed();
    assert!(
        after >= ttl - Duration::from_millis(20),
        "elected {after:?} after"
    );
    assert!(
        after < ttl + SLACK + Duration::from_millis(200),
        "{after:?}"
    );
    assert!(la.is_lost());
    assert!(lb.fence() > la.fence());
    assert_eq!(b.leader().unwrap().unwrap().identity, b.identity());
    assert!(!la.resign().unwrap(), "no longer led");
    assert!(lb.resign().unwrap());
}

#[test]
fn campaign_and_observe_timeouts() {
    let server = Server::start();
    let a = Election::new(server.client(), "t:leader");
    let la = a.campaign().unwrap();
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let b = Election::new(server.client(), "t:leader").wait(wait);
    assert!(matches!(b.campaign(), Err(Error::Timeout)));
    let took = started.elapsed();
    assert!(
        took >= wait && took < wait + SLACK + Duration::from_millis(200),
        "{took:?}"
    );
    assert_eq!(
        waiters(&server, "t:leader"),
        0,
        "the campaign left the queue"
    );

    // Observes of 100 ms answer the unchanged state: nothing is yielded, however many.
    let rx = follow(&b.clone().observe_timeout(Duration::from_millis(100)));
    assert_eq!(change(&rx), Some(leader(&la)));
    quiet(&rx, Duration::from_millis(700));
    let resigned = Instant::now();
    la.resign().unwrap();
    assert_eq!(change(&rx), None);
    assert!(resigned.elapsed() < Duration::from_millis(50) + SLACK);
}

/// Each change, in order: a grant to a free key, a hand-off from the queue (no vacancy in
/// between: observers are answered after the waiters a release grants), a new fence, a
/// resignation with nobody waiting, a lease that ends.
#[test]
fn observe_sees_each_change() {
    let server = Server::start();
    let key = "{o}:leader";
    let cand = |id: &str| {
        Election::new(server.client_resp3(), key)
            .with_identity(id)
            .ttl(Duration::from_secs(3))
            .observe_timeout(Duration::from_millis(300))
    };
    let rx = follow(&cand("watcher"));
    assert_eq!(change(&rx), None, "first, the state: nobody leads");

    let la = cand("a").campaign().unwrap();
    assert_eq!(change(&rx), Some(leader(&la)));
    let waiting = thread::spawn({
        let b = cand("b");
        move || b.wait(Duration::from_secs(5)).campaign()
    });
    assert!(eventually(Duration::from_secs(3), || waiters(&server, key) == 1));
    la.resign().unwrap();
    let lb = waiting.join().unwrap().unwrap();
    assert_eq!(change(&rx), Some(leader(&lb)));
    let fenced = lb.refence().unwrap();
    assert_eq!(
        change(&rx),
        Some(Leader {
            identity: "b".into(),
            fence: fenced
        })
    );
    lb.resign().unwrap();
    assert_eq!(change(&rx), None);

    let lc = cand("c")
        .ttl(Duration::from_millis(400))
        .no_keepalive()
        .campaign()
        .unwrap();
    assert_eq!(change(&rx), Some(leader(&lc)));
    let granted = Instant::now();
    assert_eq!(change(&rx), None, "the lease ended");
    assert!(granted.elapsed() < Duration::from_millis(400) + SLACK);
    quiet(&rx, Duration::from_millis(700));
}

/// The `CLIENT LIST` id of the connection blocked in `LOCK.OBSERVE`.
fn observer_id(server: &Server) -> Option<i64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .ok()?;
    list.lines()
        .find(|l| l.contains(" cmd=lock.observe"))
        .and_then(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
}

/// The server's `MONITOR` feed.
struct Monitor(std::io::BufReader<std::net::TcpStream>);

impl Monitor {
    fn start(server: &Server) -> Monitor {
        use std::io::{BufRead, Write};
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = std::io::BufReader::new(tcp);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim_end(), "+OK");
        Monitor(reader)
    }

    /// The arguments of the next `LOCK.OBSERVE` any client sends.
    fn next_observe(&mut self) -> Vec<String> {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            self.0.read_line(&mut line).expect("a MONITOR line");
            // `+<time> [<db> <addr>] "LOCK.OBSERVE" "key" "seen" "timeout"`
            let args: Vec<String> = line
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            if args
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("LOCK.OBSERVE"))
            {
                return args;
            }
        }
    }
}

/// A killed connection and a restarted server: errors come as items, the observer resumes
/// from the last fence it saw (no leader yielded twice), and after the restart the empty key
/// is a vacancy and the next leader is seen.
#[test]
fn observe_resumes_after_a_killed_connection_and_a_restart() {
    let mut server = Server::start();
    let key = "resume:leader";
    let cand = |server: &Server, id: &str| {
        Election::new(server.client(), key)
            .with_identity(id)
            .observe_timeout(Duration::from_secs(5))
    };
    let rx = follow(&cand(&server, "watcher"));
    assert_eq!(change(&rx), None);
    let la = cand(&server, "a").campaign().unwrap();
    assert_eq!(change(&rx), Some(leader(&la)));

    let mut id = None;
    assert!(eventually(Duration::from_secs(3), || {
        id = observer_id(&server);
        id.is_some()
    }));
    let mut monitor = Monitor::start(&server);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id.unwrap())
        .query(&mut server.conn())
        .unwrap();
    let err = rx.recv_timeout(Duration::from_secs(3)).unwrap();
    assert!(err.is_err(), "the killed connection is reported: {err:?}");
    // Back in `LOCK.OBSERVE` under the fence it saw: the same leader is not yielded again.
    assert!(eventually(Duration::from_secs(3), || observer_id(&server)
        .is_some_and(|new| Some(new) != id)));
    quiet(&rx, Duration::from_millis(300));
    assert_eq!(
        monitor.next_observe(),
        ["LOCK.OBSERVE", key, &la.fence().to_string(), "5000"],
        "the first observe after the reconnect resumes from the fence seen"
    );
    let waiting = thread::spawn({
        let b = cand(&server, "b");
        move || b.wait(Duration::from_secs(5)).campaign()
    });
    assert!(eventually(Duration::from_secs(3), || waiters(&server, key) == 1));
    la.resign().unwrap();
    let lb = waiting.join().unwrap().unwrap();
    assert_eq!(change(&rx), Some(leader(&lb)));

    // Restarted empty: errors while it is down, then the vacancy, then the next leader.
    server.restart();
    let mut errors = 0;
    let vacancy = loop {
        match rx.recv_timeout(Duration::from_secs(10)).expect("an item") {
            Err(_) => errors += 1,
            Ok(change) => break change,
        }
    };
    assert!(errors >= 1);
    assert_eq!(vacancy, None);
    assert!(!matches!(lb.wait_lost(), LossReason::Released));
    let ld = cand(&server, "d").campaign().unwrap();
    assert!(ld.fence() > lb.fence(), "fences come from the clock");
    assert_eq!(change(&rx), Some(leader(&ld)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_campaign_resign_leader_and_observe() {
    let server = Server::start();
    let key = "{x}:leader";
    let cand = |id: &str| {
        aio::Election::new(server.client_resp3(), key)
            .with_identity(id)
            .observe_timeout(Duration::from_millis(200))
    };
    let mut observer = cand("watcher").observe();
    assert_eq!(next(&mut observer).await, None);
    let a = cand("a");
    let la = a.campaign().await.unwrap();
    assert_eq!(la.identity(), "a");
    assert_eq!(a.leader().await.unwrap(), Some(leader(&la)));
    assert_eq!(next(&mut observer).await, Some(leader(&la)));
    assert!(matches!(a.campaign().await, Err(Error::Config(_))));

    // Cancel-safe: a `next_change` dropped while blocked loses nothing.
    let cut = tokio::time::timeout(Duration::from_millis(500), observer.next_change()).await;
    assert!(cut.is_err(), "nothing changed: {cut:?}");

    let waiting = tokio::spawn({
        let b = cand("b").wait(Duration::from_secs(5));
        async move { b.campaign().await }
    });
    let m = aio::Mutex::new(server.client(), key);
    while m.info().await.unwrap().map(|i| i.waiters) != Some(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fa = la.fence();
    assert!(la.resign().await.unwrap());
    let lb = waiting.await.unwrap().unwrap();
    assert!(lb.fence() > fa);
    // Through the `Stream` impl.
    let polled = std::future::poll_fn(|cx| {
        futures_core::Stream::poll_next(std::pin::Pin::new(&mut observer), cx)
    });
    assert_eq!(polled.await.unwrap().unwrap(), Some(leader(&lb)));

    // Dropped: resigned in a task; the candidate campaigns again once that is done.
    drop(lb);
    assert_eq!(next(&mut observer).await, None);
    assert_eq!(a.leader().await.unwrap(), None);
    let la = a.campaign().await.unwrap();
    assert_eq!(next(&mut observer).await, Some(leader(&la)));
    // Dropped and at once campaigned for again: the new campaign waits for the release.
    drop(la);
    let again = a.campaign().await.unwrap();
    // (The vacancy between may be shorter than the observer's round trip, and not seen.)
    let mut change = next(&mut observer).await;
    if change.is_none() {
        change = next(&mut observer).await;
    }
    assert_eq!(change, Some(leader(&again)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!again.is_lost());
    assert!(again.resign().await.unwrap());
}

/// A campaign cancelled around the moment it is granted, then started again at once: the
/// cancelled one's clean-up (which releases the identity's grant) does not end the new
/// leadership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_campaign_cancelled_then_again() {
    let server = Server::start();
    let key = "again:leader";
    let ttl = Duration::from_millis(300);
    let c = aio::Election::new(server.client(), key)
        .with_identity("c")
        .ttl(ttl)
        .wait(Duration::from_secs(5));
    let mut con = server.conn();
    for round in 0..12u64 {
        let _: u64 = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg("holder")
            .arg(30_000)
            .query(&mut con)
            .unwrap();
        // The release lands before, at about, or after the moment the campaign is dropped.
        let release = {
            let client = server.client();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 + round % 4 * 5)).await;
                let mut c = client.get_multiplexed_async_connection().await.unwrap();
                let _: i64 = redis::cmd("LOCK.RELEASE")
                    .arg(key)
                    .arg("holder")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            })
        };
        let cut = tokio::time::timeout(Duration::from_millis(30), c.campaign()).await;
        // A campaign that won the race resigns here.
        drop(cut);
        release.await.unwrap();
        let leadership = c.campaign().await.unwrap();
        tokio::time::sleep(ttl).await;
        assert!(
            !leadership.is_lost(),
            "round {round}: {:?}",
            leadership.signal().reason()
        );
        assert_eq!(c.leader().await.unwrap(), Some(leader(&leadership)));
        assert!(leadership.resign().await.unwrap());
    }
}

#[test]
fn cluster_elections_on_every_node() {
    let cluster = Cluster::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // {a}, {b} and {c} hash to slots served by three different masters.
    for tag in ["a", "b", "c"] {
        let key = format!("{{{tag}}}:leader");
        let cand = |id: &str| {
            Election::new(cluster.client(), key.as_str())
                .with_identity(id)
                .observe_timeout(Duration::from_millis(300))
        };
        let rx = follow(&cand("watcher"));
        assert_eq!(change(&rx), None);
        let la = cand("a").campaign().unwrap();
        assert_eq!(change(&rx), Some(leader(&la)));
        assert_eq!(cand("x").leader().unwrap(), Some(leader(&la)));
        la.resign().unwrap();
        assert_eq!(change(&rx), None);

        rt.block_on(async {
            let e = aio::Election::new(cluster.client(), key.as_str())
                .with_identity("b")
                .observe_timeout(Duration::from_millis(300));
            let mut observer = e.observe();
            assert_eq!(next(&mut observer).await, None);
            let lb = e.campaign().await.unwrap();
            assert_eq!(next(&mut observer).await, Some(leader(&lb)));
            assert_eq!(e.leader().await.unwrap(), Some(leader(&lb)));
            lb.resign().await.unwrap();
            assert_eq!(next(&mut observer).await, None);
        });
    }
}
