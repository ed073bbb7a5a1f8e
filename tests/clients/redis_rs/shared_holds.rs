//! redis-rs's read-write lock and semaphore: each holder an [`Actor`], a thread that takes its
//! hold through the recipes of the parent module.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{guarded, permit, read_lock, write_lock, Guarded, Hold};
use crate::common::{info, wait_until, Server};
use crate::lock_counters::assert_shared_counts;
use crate::processes::note;
use crate::shared_hold_checks::{
    assert_shape, holders, shape, wait_shape, GRANT_WITHIN, UPGRADE_REFUSED,
};

/// The fence and the instant of a grant, as an actor saw them.
type Granted = Arc<Mutex<Option<(u64, Instant)>>>;

/// One client of a scenario, in a thread of its own: it takes its hold through a recipe and,
/// once granted, counts itself in `in_flight` and stays until told to leave; then it drops
/// the hold, which releases it.
struct Actor {
    name: &'static str,
    granted: Granted,
    leave: mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

/// Holders counted by the clients themselves, apart from the server: (now, most at once).
type InFlight = Arc<Mutex<(u32, u32)>>;

impl Actor {
    fn start(
        name: &'static str,
        in_flight: &InFlight,
        take: impl FnOnce() -> redis::RedisResult<Option<Hold>> + Send + 'static,
    ) -> Actor {
        let granted = Granted::default();
        let (leave, left) = mpsc::channel::<()>();
        let (g, in_flight) = (granted.clone(), in_flight.clone());
        let thread = thread::spawn(move || {
            let hold = take()
                .unwrap()
                .unwrap_or_else(|| panic!("{name} was not granted"));
            {
                let mut n = in_flight.lock().unwrap();
                n.0 += 1;
                n.1 = n.1.max(n.0);
            }
            *g.lock().unwrap() = Some((hold.fence, Instant::now()));
            let _ = left.recv_timeout(Duration::from_secs(20));
            in_flight.lock().unwrap().0 -= 1;
            drop(hold);
        });
        Actor {
            name,
            granted,
            leave,
            thread,
        }
    }

    fn granted(&self) -> Option<(u64, Instant)> {
        *self.granted.lock().unwrap()
    }

    #[track_caller]
    fn wait_granted(&self) -> (u64, Instant) {
        let ok = wait_until(Duration::from_secs(5), || {
            self.granted().is_some() || self.thread.is_finished()
        });
        assert!(
            ok && self.granted().is_some(),
            "{} was never granted",
            self.name
        );
        self.granted().unwrap()
    }

    /// Tells it to leave; returns once its hold is released.
    fn finish(self) {
        let _ = self.leave.send(());
        self.thread.join().expect(self.name);
    }
}

/// redis-rs, RESP2 and RESP3: a read-write lock and semaphore in raw commands (the
/// `Hold` guard and `read_lock`, `write_lock`, `permit` in `redis_rs.rs`), each holder a
/// thread with a connection of its own. Two readers hold together while a writer waits for both, a reader
/// after the writer waits for it, the writer's guarded write lands and a reader's fence is
/// refused; a semaphore of 2 permits whose third caller waits for a release, and a caller that
/// gives up does not run. Also a reader's renewal, the refused upgrade and a downgrade.
#[test]
fn redis_rs_shared_holds() {
    let server = Server::new();
    for resp3 in [false, true] {
        let url = if resp3 {
            format!("{}?protocol=resp3", server.url())
        } else {
            server.url()
        };
        let client = redis::Client::open(url).unwrap();
        rs_same_token(&client);
        let rw = rs_readers_and_writer(&client);
        let sem = rs_semaphore(&client);
        note(&format!(
            "redis-rs RESP{} shared: ok (readers {}, {} < writer {} < reader {}; permits {}, {} < {})",
            if resp3 { 3 } else { 2 },
            rw[0],
            rw[1],
            rw[2],
            rw[3],
            sem[0],
            sem[1],
            sem[2]
        ));
    }
    assert_shared_counts(&server, 2);
}

fn rs_same_token(client: &redis::Client) {
    let mut con = client.get_connection().unwrap();
    let key = format!("doc:{}", uuid::Uuid::new_v4());
    let token = uuid::Uuid::new_v4().to_string();
    let acquire = |con: &mut redis::Connection, ttl: u64, shared: bool| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&key).arg(&token).arg(ttl);
        if shared {
            cmd.arg("SHARED");
        }
        cmd.query::<Option<u64>>(con)
    };
    let f = acquire(&mut con, 10_000, true).unwrap().unwrap();
    assert_eq!(acquire(&mut con, 30_000, true).unwrap(), Some(f), "renewal");
    let h = &holders(&mut con, &key)[0];
    assert_eq!(
        (h.0.as_str(), h.1, h.3.as_str()),
        (token.as_str(), f, "shared")
    );
    assert!(h.2 > 20_000, "renewed: {h:?}");
    let err = acquire(&mut con, 30_000, false).unwrap_err();
    assert_eq!(
        (err.code(), err.detail()),
        (Some("ERR"), Some(UPGRADE_REFUSED)),
        "{err}"
    );
    let h = &holders(&mut con, &key)[0];
    assert_eq!(
        (h.1, h.3.as_str()),
        (f, "shared"),
        "the refused upgrader keeps its hold"
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert!(released);
    let fx = acquire(&mut con, 30_000, false).unwrap().unwrap();
    assert!(fx > f);
    assert_eq!(
        acquire(&mut con, 30_000, true).unwrap(),
        Some(fx),
        "downgrade"
    );
    let i = info(&mut con, &key).unwrap();
    assert_eq!(
        (i.holder, i.mode.as_str(), i.holders, i.fence as u64),
        (None, "shared", 1, fx)
    );
    let released: bool = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg(&token)
        .query(&mut con)
        .unwrap();
    assert!(released);
}

/// Two readers hold the lock together; a writer queues until both have released; a reader
/// that comes after the writer waits for it. The fences of the four holds.
fn rs_readers_and_writer(client: &redis::Client) -> [u64; 4] {
    let mut con = client.get_connection().unwrap();
    let key = format!("{{catalog:{}}}:lock", uuid::Uuid::new_v4());
    let data = key.replace(":lock", ":prices");
    let in_flight = InFlight::default();
    let reader = |name| {
        let (client, key) = (client.clone(), key.clone());
        Actor::start(name, &in_flight, move || {
            read_lock(&client, &key, 30_000, 5_000)
        })
    };
    let a = reader("reader a");
    let (fa, _) = a.wait_granted();
    let b = reader("reader b");
    let (fb, _) = b.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| (h.1, h.3.as_str()))
            .collect::<Vec<_>>(),
        [(fa, "shared"), (fb, "shared")]
    );
    // A reader's fence guards no write: LOCK.GUARD runs under an exclusive hold only.
    let refused: Guarded<i64> = guarded(&mut con, &key, fb, ("HSET", &data, "pen", 1)).unwrap();
    assert_eq!(
        refused,
        Guarded::Fenced("the lock is held shared".to_string())
    );

    let writer = {
        let (client, key, data) = (client.clone(), key.clone(), data.clone());
        Actor::start("writer", &in_flight, move || {
            let hold = write_lock(&client, &key, 30_000, 5_000)?;
            if let Some(hold) = &hold {
                // A write the server checks the fence of.
                let mut con = client.get_connection()?;
                let wrote: Guarded<i64> =
                    guarded(&mut con, &key, hold.fence, ("HSET", &data, "pen", 3))?;
                assert_eq!(wrote, Guarded::Ran(1));
            }
            Ok(hold)
        })
    };
    wait_shape(&mut con, &key, "shared", 2, 1);
    let c = reader("reader c");
    wait_shape(&mut con, &key, "shared", 2, 2);
    a.finish();
    assert_shape(&mut con, &key, "shared", 1, 2);
    assert!(
        writer.granted().is_none(),
        "the writer holds the lock while reader b does"
    );
    let released = Instant::now();
    b.finish();
    let (fw, at) = writer.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "writer granted {:?} after",
        at - released
    );
    assert!(fw > fb, "writer {fw} after readers {fa}, {fb}");
    let i = info(&mut con, &key).unwrap();
    assert_eq!(
        (i.mode.as_str(), i.holders, i.waiters, i.fence as u64),
        ("exclusive", 1, 1, fw)
    );
    assert!(
        c.granted().is_none(),
        "a reader that came after the writer joined before it"
    );
    let released = Instant::now();
    writer.finish();
    let (fc, at) = c.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "reader c granted {:?} after",
        at - released
    );
    assert!(fc > fw);
    c.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    assert_eq!(*in_flight.lock().unwrap(), (0, 2));
    let pen: String = redis::cmd("HGET")
        .arg(&data)
        .arg("pen")
        .query(&mut con)
        .unwrap();
    assert_eq!(pen, "3");
    let _: () = redis::cmd("DEL").arg(&data).query(&mut con).unwrap();
    [fa, fb, fw, fc]
}

/// A semaphore of 2 permits: two callers hold one each, a third waits until one of them
/// releases; a caller that gives up waiting does not run; never more than 2 at once (counted
/// by the callers, apart from the server). The fences of the three permits.
fn rs_semaphore(client: &redis::Client) -> [u64; 3] {
    let mut con = client.get_connection().unwrap();
    let key = format!("api:{}", uuid::Uuid::new_v4());
    let in_flight = InFlight::default();
    let caller = |name| {
        let (client, key) = (client.clone(), key.clone());
        Actor::start(name, &in_flight, move || {
            permit(&client, &key, 2, 30_000, 5_000)
        })
    };
    let p1 = caller("caller 1");
    let (f1, _) = p1.wait_granted();
    let p2 = caller("caller 2");
    let (f2, _) = p2.wait_granted();
    assert_shape(&mut con, &key, "shared", 2, 0);

    // Both permits taken: a caller that waits 100 ms gets None, and holds nothing.
    let t0 = Instant::now();
    assert!(permit(client, &key, 2, 30_000, 100).unwrap().is_none());
    assert!(t0.elapsed() >= Duration::from_millis(90));

    let p3 = caller("caller 3");
    wait_shape(&mut con, &key, "shared", 2, 1);
    assert!(p3.granted().is_none());
    let released = Instant::now();
    p1.finish();
    let (f3, at) = p3.wait_granted();
    assert!(
        at - released < GRANT_WITHIN,
        "caller 3 granted {:?} after",
        at - released
    );
    assert_shape(&mut con, &key, "shared", 2, 0);
    assert_eq!(
        holders(&mut con, &key)
            .iter()
            .map(|h| h.1)
            .collect::<Vec<_>>(),
        [f2, f3]
    );
    assert!(f3 > f2 && f2 > f1);
    p2.finish();
    p3.finish();
    assert_eq!(
        shape(&mut con, &key),
        None,
        "released and nobody waits: gone"
    );
    assert_eq!(*in_flight.lock().unwrap(), (0, 2));
    [f1, f2, f3]
}
