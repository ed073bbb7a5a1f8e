use super::*;

fn info(holder: Option<&str>, fence: u64, mode: Mode, holders: u64) -> Option<LockInfo> {
    Some(LockInfo {
        holder: holder.map(str::to_string),
        fence,
        ttl: None,
        waiters: 0,
        mode,
        holders,
    })
}

fn leader(id: &str, fence: u64) -> Option<Option<Leader>> {
    Some(Some(Leader {
        identity: id.to_string(),
        fence,
    }))
}

const T: Duration = Duration::from_secs(1);

#[test]
fn leaders_in_fence_order_and_vacancies_once() {
    let mut f = Follow::default();
    assert!(f
        .command("k", T)
        .get_packed_command()
        .ends_with(b"LOCK.INFO\r\n$1\r\nk\r\n"));
    // The first state is reported even when nobody leads.
    assert_eq!(f.reply(None, T, T), Some(None));
    assert_eq!(f.seen, 0);
    assert_eq!(f.reply(None, T, T), None, "a timeout: nothing new");
    let a = info(Some("a"), 10, Mode::Exclusive, 1);
    assert_eq!(f.reply(a.clone(), T, T), leader("a", 10));
    assert_eq!(f.seen, 10);
    assert_eq!(f.reply(a, T, T), None, "the same leader again");
    // Released, others waiting: no holders, the last fence still 10.
    assert_eq!(f.reply(info(None, 10, Mode::None, 0), T, T), Some(None));
    assert_eq!(f.seen, 0);
    assert_eq!(
        f.reply(info(Some("b"), 12, Mode::Exclusive, 1), T, T),
        leader("b", 12)
    );
    // A server that lost the newest grants: the old leader is not reported again.
    assert_eq!(
        f.reply(info(Some("a"), 10, Mode::Exclusive, 1), T, T),
        Some(None)
    );
    assert_eq!(f.reply(info(Some("c"), 11, Mode::Exclusive, 1), T, T), None);
    assert_eq!(
        f.reply(info(Some("c"), 13, Mode::Exclusive, 1), T, T),
        leader("c", 13)
    );
    // Held shared: no leader.
    assert_eq!(f.reply(info(None, 14, Mode::Shared, 2), T, T), Some(None));
}

#[test]
fn resumes_from_the_last_fence_seen() {
    let mut f = Follow::default();
    f.reply(info(Some("a"), 10, Mode::Exclusive, 1), T, T);
    f.failed();
    assert_eq!(f.pause(), Duration::ZERO, "the first retry is at once");
    f.failed();
    assert!(f.pause() > Duration::ZERO);
    let args: Vec<Vec<u8>> = f
        .command("k", T)
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => b"<other>".to_vec(),
        })
        .collect();
    let want: Vec<&[u8]> = vec![b"LOCK.OBSERVE", b"k", b"10", b"1000"];
    assert_eq!(args, want);
    f.reply(info(Some("a"), 10, Mode::Exclusive, 1), T, T);
    assert_eq!(f.pause(), Duration::ZERO, "reset by a reply");
}

#[test]
fn replies_at_once_without_a_change_are_paced() {
    let mut f = Follow::default();
    f.reply(None, Duration::ZERO, T);
    for _ in 0..3 {
        f.reply(None, Duration::ZERO, T);
    }
    assert!(f.pause() > Duration::ZERO);
    f.reply(None, T, T);
    assert_eq!(f.pause(), Duration::ZERO, "a timeout is no spin");
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Election>();
    send_sync::<Leadership>();
    send::<Observer>();
    send_sync::<crate::aio::Election>();
    send_sync::<crate::aio::Leadership>();
    send::<crate::aio::Observer>();
}

#[test]
fn default_identities_are_unique_and_fit() {
    let (a, b) = (default_identity(), default_identity());
    assert_ne!(a, b);
    assert!(a.contains(&format!(":{}:", std::process::id())));
    assert!(check_identity(&a).is_ok());
    assert!(check_identity("").is_err());
    assert!(check_identity(&"x".repeat(257)).is_err());
}
