//! Reply shapes under RESP2 and RESP3: what each command replies, down to the bytes of its
//! nulls and of `LOCK.INFO`'s whole reply, for both protocols.

use crate::cmd;
use crate::common::*;
use redis::Value;

#[test]
fn info_reply_shapes_resp2_and_resp3() {
    let s = Server::new();
    let mut c2 = s.conn();
    let mut c3 = s.conn3();
    let f = acquire(&mut c2, "k", "tok", 10_000).unwrap();

    let v2 = cmd!(&mut c2, "LOCK.INFO", "k").unwrap();
    match &v2 {
        Value::Array(items) => {
            assert_eq!(items.len(), 12);
            let names: Vec<_> = items
                .iter()
                .step_by(2)
                .map(|v| match v {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("RESP2 field names must be bulk strings: {other:?}"),
                })
                .collect();
            assert_eq!(
                names,
                ["holder", "fence", "ttl", "waiters", "mode", "holders"]
            );
        }
        other => panic!("RESP2 LOCK.INFO must be a flat array, got {other:?}"),
    }
    let v3 = cmd!(&mut c3, "LOCK.INFO", "k").unwrap();
    assert!(
        matches!(v3, Value::Map(_)),
        "RESP3 LOCK.INFO must be a map, got {v3:?}"
    );
    let (i2, i3) = (parse_info(&v2).unwrap(), parse_info(&v3).unwrap());
    assert_eq!(i2.holder.as_deref(), Some(&b"tok"[..]));
    assert_eq!(i3.holder, i2.holder);
    assert_eq!((i2.fence, i3.fence), (f, f));
    assert_eq!((i2.waiters, i3.waiters), (0, 0));
    assert!((i2.ttl - i3.ttl).abs() < 100);

    // Other replies under RESP3.
    assert_eq!(
        cmd!(&mut c3, "LOCK.ACQUIRE", "k", "tok", 10_000),
        Ok(Value::Int(f))
    );
    assert_eq!(
        cmd!(&mut c3, "LOCK.ACQUIRE", "k", "x", 10_000),
        Ok(Value::Nil)
    );
    assert_eq!(cmd!(&mut c3, "LOCK.FENCE", "k", "x"), Ok(Value::Nil));
    assert_eq!(
        cmd!(&mut c3, "LOCK.EXTEND", "k", "x", 10),
        Ok(Value::Int(0))
    );
    assert_eq!(
        cmd!(&mut c3, "LOCK.EXTEND", "k", "tok", 10_000),
        Ok(Value::Int(1))
    );
    assert_eq!(cmd!(&mut c3, "LOCK.RELEASE", "k", "tok"), Ok(Value::Int(1)));
}

/// Byte-exact null replies: `$-1`/`*-1` under RESP2, `_` under RESP3.
#[test]
fn null_replies_on_the_wire() {
    let s = Server::new();
    let mut c = s.conn();
    acquire(&mut c, "held", "owner", 60_000).unwrap();
    let mut raw = s.raw();
    let resp2_null = |r: &[u8]| r == b"$-1\r\n" || r == b"*-1\r\n";
    let r = raw.call(&[b"LOCK.INFO", b"missing"]);
    assert!(
        resp2_null(&r),
        "RESP2 LOCK.INFO missing: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.ACQUIRE", b"held", b"other", b"1000"]);
    assert!(
        resp2_null(&r),
        "RESP2 ACQUIRE held: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.FENCE", b"held", b"other"]);
    assert!(
        resp2_null(&r),
        "RESP2 FENCE: {:?}",
        String::from_utf8_lossy(&r)
    );
    let r = raw.call(&[b"LOCK.INFO", b"held"]);
    assert!(
        r.starts_with(b"*12\r\n"),
        "RESP2 INFO: {:?}",
        String::from_utf8_lossy(&r)
    );

    let hello = raw.call(&[b"HELLO", b"3"]);
    assert!(
        hello.starts_with(b"%"),
        "HELLO 3: {:?}",
        String::from_utf8_lossy(&hello)
    );
    assert_eq!(raw.call(&[b"LOCK.INFO", b"missing"]), b"_\r\n");
    assert_eq!(
        raw.call(&[b"LOCK.ACQUIRE", b"held", b"other", b"1000"]),
        b"_\r\n"
    );
    assert_eq!(raw.call(&[b"LOCK.FENCE", b"held", b"other"]), b"_\r\n");
    let r = raw.call(&[b"LOCK.INFO", b"held"]);
    assert!(
        r.starts_with(b"%6\r\n"),
        "RESP3 INFO: {:?}",
        String::from_utf8_lossy(&r)
    );
    assert_eq!(raw.call(&[b"LOCK.RELEASE", b"held", b"other"]), b":0\r\n");
}

/// `LOCK.INFO`'s whole reply on the wire, exclusive and shared, in RESP2 and RESP3: field
/// names and the mode are bulk strings (as `HGETALL` replies), the shared lock's holder a
/// null, numbers integers; only the ttl moves between two calls.
#[test]
fn info_reply_on_the_wire() {
    let s = Server::new();
    let mut c = s.conn();
    let fe = acquire(&mut c, "ex", "owner", 60_000).unwrap();
    let fs = match cmd!(&mut c, "LOCK.ACQUIRE", "sh", "r1", 60_000, "SHARED") {
        Ok(Value::Int(f)) => f,
        other => panic!("shared acquire: {other:?}"),
    };
    let bulk = |t: &str| format!("${}\r\n{t}\r\n", t.len());
    let fields = |holder: &str, fence: i64, mode: &str| {
        [
            bulk("holder"),
            holder.to_string(),
            bulk("fence"),
            format!(":{fence}\r\n"),
            bulk("ttl"),
            "TTL".to_string(),
            bulk("waiters"),
            ":0\r\n".to_string(),
            bulk("mode"),
            bulk(mode),
            bulk("holders"),
            ":1\r\n".to_string(),
        ]
        .concat()
    };
    // The ttl, somewhere in the last minute, as `TTL`.
    let masked = |r: Vec<u8>| -> String {
        let r = String::from_utf8(r).expect("UTF-8 reply");
        let at = r.find("$3\r\nttl\r\n:").expect("a ttl field") + 10;
        let end = at + r[at..].find("\r\n").expect("the ttl's end") + 2;
        let ttl: i64 = r[at..end - 2].parse().expect("an integer ttl");
        assert!((59_000..=60_000).contains(&ttl), "ttl {ttl} in {r:?}");
        format!("{}TTL{}", &r[..at - 1], &r[end..])
    };
    let mut raw = s.raw();
    for (head, null) in [("*12\r\n", "$-1\r\n"), ("%6\r\n", "_\r\n")] {
        if head.starts_with('%') {
            assert!(raw.call(&[b"HELLO", b"3"]).starts_with(b"%"));
        }
        assert_eq!(
            masked(raw.call(&[b"LOCK.INFO", b"ex"])),
            format!("{head}{}", fields(&bulk("owner"), fe, "exclusive")),
            "exclusive, {head:?}"
        );
        assert_eq!(
            masked(raw.call(&[b"LOCK.INFO", b"sh"])),
            format!("{head}{}", fields(null, fs, "shared")),
            "shared, {head:?}"
        );
    }
}
