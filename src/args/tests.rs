//! The argument parsers' unit tests.

#[test]
fn observe_takes_a_state_and_a_timeout() {
    assert_eq!(observe(&[b"0", b"0"]), Ok((0, 0)));
    assert_eq!(
        observe(&[b"9223372036854775807", b"1500"]),
        Ok((i64::MAX as u64, 1500))
    );
    assert_eq!(observe(&[b"-1", b"0"]), Err(LockError::Negative("seen")));
    assert_eq!(observe(&[b"x", b"0"]), Err(LockError::NotAnInteger("seen")));
    assert_eq!(
        observe(&[b"18446744073709551615", b"0"]),
        Err(LockError::NotAnInteger("seen"))
    );
    assert_eq!(observe(&[b"1", b"-1"]), Err(LockError::NegativeTimeout));
    assert_eq!(
        observe(&[b"1", b"1.5"]),
        Err(LockError::NotAnInteger("timeout"))
    );
    assert_eq!(observe(&[b"1"]), Err(LockError::Arity));
    assert_eq!(observe(&[b"1", b"2", b"3"]), Err(LockError::Arity));
}

#[test]
fn a_guard_fence_is_a_positive_integer() {
    assert_eq!(guard_fence(b"1"), Ok(1));
    assert_eq!(guard_fence(b"9007199254740991"), Ok(9_007_199_254_740_991));
    for bad in [&b"0"[..], b"-1", b"-9223372036854775808"] {
        assert_eq!(
            guard_fence(bad),
            Err(LockError::NotPositive("fence")),
            "{bad:?}"
        );
    }
    for bad in [
        &b"abc"[..],
        b"",
        b"01",
        b"+5",
        b"-0",
        b"18446744073709551616",
    ] {
        assert_eq!(
            guard_fence(bad),
            Err(LockError::NotAnInteger("fence")),
            "{bad:?}"
        );
    }
}

use super::*;

const MAX: i64 = 86_400_000;

#[test]
fn acquire_plain_and_with_wait() {
    assert_eq!(
        acquire(&[b"t", b"100"], MAX),
        Ok(AcquireArgs {
            token: b"t",
            ttl: 100,
            want: Want::EXCLUSIVE,
            wait: None
        })
    );
    assert_eq!(
        acquire(&[b"t", b"100", b"wait", b"0"], MAX).unwrap().wait,
        Some(0)
    );
    assert_eq!(
        acquire(&[b"t", b"100", b"WAIT", b"250"], MAX).unwrap().wait,
        Some(250)
    );
}

#[test]
fn acquire_rejects_bad_options() {
    assert_eq!(acquire(&[b"t"], MAX), Err(LockError::Arity));
    assert_eq!(
        acquire(&[b"t", b"1", b"NOPE"], MAX),
        Err(LockError::Syntax(Syntax::UnknownOption))
    );
    assert_eq!(
        acquire(&[b"t", b"1", b"WAIT"], MAX),
        Err(LockError::Syntax(Syntax::NoValue("WAIT", "a timeout")))
    );
    assert_eq!(
        acquire(&[b"t", b"1", b"WAIT", b"1", b"WAIT", b"1"], MAX),
        Err(LockError::Syntax(Syntax::Repeated("WAIT")))
    );
    // Repeated before missing its value.
    assert_eq!(
        acquire(&[b"t", b"1", b"WAIT", b"1", b"wait"], MAX),
        Err(LockError::Syntax(Syntax::Repeated("WAIT")))
    );
    assert_eq!(
        acquire(&[b"t", b"1", b"WAIT", b"-1"], MAX),
        Err(LockError::NegativeTimeout)
    );
    assert_eq!(
        acquire(&[b"t", b"1", b"WAIT", b"x"], MAX),
        Err(LockError::NotAnInteger("timeout"))
    );
}

#[test]
fn shared_and_limit_in_any_order_once_each() {
    let shared = |limit| Want {
        mode: Mode::Shared,
        limit,
    };
    let want = |a: &[&[u8]]| acquire(a, MAX).map(|a| (a.want, a.wait));
    assert_eq!(want(&[b"t", b"1", b"SHARED"]), Ok((shared(None), None)));
    assert_eq!(
        want(&[b"t", b"1", b"shared", b"limit", b"4", b"wait", b"9"]),
        Ok((shared(Some(4)), Some(9)))
    );
    assert_eq!(
        want(&[
            b"t",
            b"1",
            b"WAIT",
            b"0",
            b"LIMIT",
            b"2147483648",
            b"SHARED"
        ]),
        Ok((shared(Some(MAX_LIMIT)), Some(0)))
    );
    for (bad, why) in [
        (
            &[&b"t"[..], b"1", b"LIMIT", b"4"][..],
            Syntax::LimitWithoutShared,
        ),
        (
            &[b"t", b"1", b"WAIT", b"0", b"LIMIT", b"4"],
            Syntax::LimitWithoutShared,
        ),
        (
            &[b"t", b"1", b"SHARED", b"SHARED"],
            Syntax::Repeated("SHARED"),
        ),
        (
            &[b"t", b"1", b"SHARED", b"LIMIT", b"1", b"LIMIT", b"1"],
            Syntax::Repeated("LIMIT"),
        ),
        (
            &[b"t", b"1", b"SHARED", b"LIMIT"],
            Syntax::NoValue("LIMIT", "a number"),
        ),
        (
            &[b"t", b"1", b"LIMIT"],
            Syntax::NoValue("LIMIT", "a number"),
        ),
        (&[b"t", b"1", b"EXCLUSIVE"], Syntax::UnknownOption),
        (&[b"t", b"1", b"SHARED", b"4"], Syntax::UnknownOption),
    ] {
        assert_eq!(acquire(bad, MAX), Err(LockError::Syntax(why)), "{bad:?}");
    }
    for (limit, e) in [
        (&b"0"[..], LockError::LimitOutOfRange),
        (b"-1", LockError::LimitOutOfRange),
        (b"2147483649", LockError::LimitOutOfRange),
        (b"x", LockError::NotAnInteger("limit")),
    ] {
        assert_eq!(
            acquire(&[b"t", b"1", b"SHARED", b"LIMIT", limit], MAX),
            Err(e)
        );
    }
}

#[test]
fn lock_apply_takes_a_mode_and_a_last_fence() {
    let f = b"3678527467665408";
    let a = apply(&[b"t", b"1796156050072", f]).unwrap();
    assert_eq!((a.mode, a.last_fence), (Mode::Exclusive, None));
    let a = apply(&[
        b"t",
        b"1796156050072",
        f,
        b"SHARED",
        b"LAST",
        b"3678527467667460",
    ]);
    let a = a.unwrap();
    assert_eq!(
        (a.mode, a.last_fence),
        (Mode::Shared, Some(3_678_527_467_667_460))
    );
    let a = apply(&[b"t", b"1796156050072", f, b"LAST", b"3678527467667460"]).unwrap();
    assert_eq!(
        (a.mode, a.last_fence),
        (Mode::Exclusive, Some(3_678_527_467_667_460))
    );
    for bad in [
        &[&b"t"[..], b"1", f, b"EXCLUSIVE"][..],
        &[b"t", b"1", f, b"SHARED", b"SHARED"],
        &[b"t", b"1", f, b"LAST"],
        &[b"t", b"1", f, b"LAST", b"0"],
        &[b"t", b"1", f, b"LAST", b"1", b"x"],
    ] {
        assert!(
            matches!(apply(bad), Err(LockError::BadInternal("LOCK.APPLY", _))),
            "{bad:?}"
        );
    }
}

#[test]
fn wait_deadlines_never_wrap() {
    let (mono, wall) = (5_000_000, 1_764_000_000_000);
    assert_eq!(wait_deadline(0, mono, wall), Ok(None));
    assert_eq!(wait_deadline(250, mono, wall), Ok(Some(5_250_000)));
    assert_eq!(
        wait_deadline(i64::MAX as u64, mono, wall),
        Err(LockError::TimeoutOutOfRange)
    );
    let largest = i64::MAX as u64 - wall as u64;
    assert_eq!(
        wait_deadline(largest + 1, mono, wall),
        Err(LockError::TimeoutOutOfRange)
    );
    assert_eq!(wait_deadline(largest, mono, wall), Ok(Some(u64::MAX)));
}

#[test]
fn ttl_bounds() {
    assert_eq!(
        acquire(&[b"t", b"0"], MAX),
        Err(LockError::TtlOutOfRange { max: MAX })
    );
    assert_eq!(
        acquire(&[b"t", b"-5"], MAX),
        Err(LockError::TtlOutOfRange { max: MAX })
    );
    assert_eq!(
        extend(&[b"t", b"86400001"], MAX),
        Err(LockError::TtlOutOfRange { max: MAX })
    );
    assert_eq!(
        extend(&[b"t", b"86400000"], MAX),
        Ok((&b"t"[..], 86_400_000))
    );
    for bad in [
        &b"1.5"[..],
        b"",
        b" 1",
        b"+1",
        b"01",
        b"99999999999999999999",
        b"1e3",
    ] {
        assert_eq!(
            extend(&[b"t", bad], MAX),
            Err(LockError::NotAnInteger("ttl")),
            "{bad:?}"
        );
    }
}

#[test]
fn token_bounds() {
    let long = [b'x'; 257];
    let max = [b'x'; 256];
    assert_eq!(token_only(&[b""]), Err(LockError::TokenLength));
    assert_eq!(token_only(&[&long]), Err(LockError::TokenLength));
    assert_eq!(token_only(&[&max]), Ok(&max[..]));
    assert_eq!(token_only(&[b"\0\xff"]), Ok(&b"\0\xff"[..]));
    assert_eq!(token_only(&[]), Err(LockError::Arity));
    assert_eq!(token_only(&[b"a", b"b"]), Err(LockError::Arity));
}

#[test]
fn integers_as_redis_reads_them() {
    assert_eq!(integer(b"0"), Some(0));
    assert_eq!(integer(b"-0"), None);
    assert_eq!(integer(b"-12"), Some(-12));
    assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(integer(b"9223372036854775808"), None);
    assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(integer(b"-9223372036854775809"), None);
    assert_eq!(integer(b"99999999999999999999"), None);
    assert_eq!(integer(b"007"), None);
    assert_eq!(integer(b"1x"), None);
    assert_eq!(integer(b""), None);
    assert_eq!(integer(b"-"), None);
    for n in [1i64, 42, 86_400_000, -5, 1_796_011_764_123] {
        assert_eq!(integer(n.to_string().as_bytes()), Some(n));
    }
}

#[test]
fn lock_highwater_takes_an_optional_epoch() {
    assert_eq!(highwater(&[b"5", b"7"]).unwrap(), (5, 7, 0));
    assert_eq!(highwater(&[b"5", b"7", b"epoch", b"3"]).unwrap(), (5, 7, 3));
    for bad in [
        &[b"5".as_slice(), b"7", b"EPOCH"][..],
        &[b"5", b"7", b"EPOCH", b"-1"],
        &[b"5", b"7", b"AGE", b"3"],
    ] {
        assert!(
            matches!(
                highwater(bad),
                Err(LockError::BadInternal("LOCK.HIGHWATER", _))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(highwater(&[b"5"]), Err(LockError::Arity)));
}

#[test]
fn apply_args() {
    let a = apply(&[b"tok", b"1700000000000", b"42"]).unwrap();
    assert_eq!(a.fence, 42);
    assert_eq!(a.deadline_unix_ms, 1_700_000_000_000);
    assert_eq!(
        apply(&[b"tok", b"1", b"0"]),
        Err(LockError::BadInternal("LOCK.APPLY", "fence"))
    );
    assert_eq!(
        apply(&[b"tok", b"x", b"1"]),
        Err(LockError::BadInternal("LOCK.APPLY", "deadline"))
    );
    assert_eq!(apply(&[b"tok", b"1"]), Err(LockError::Arity));
}
