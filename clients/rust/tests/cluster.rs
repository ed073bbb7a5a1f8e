//! A Redis Cluster of three masters: locks on keys of every node, routed by their hash tags,
//! with guarded writes to data of the same tag, keep-alive, and durable mode asking the
//! lock's own node.

mod support;

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis_lock_client::{aio, Error, Mode, Mutex};
use support::Cluster;

fn hset(key: &str) -> redis::Cmd {
    let mut c = redis::cmd("HSET");
    c.arg(key).arg("status").arg("paid");
    c
}

#[test]
fn locks_on_every_node() {
    let cluster = Cluster::start();
    let resp3 = ClusterClient::builder(cluster.nodes.iter().map(|n| n.url()))
        .use_protocol(redis::ProtocolVersion::RESP3)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // {a}, {b} and {c} hash to slots served by three different masters.
    for (tag, client) in [
        ("a", cluster.client()),
        ("b", resp3.clone()),
        ("c", cluster.client()),
    ] {
        let key = format!("{{{tag}}}:lock");
        let data = format!("{{{tag}}}:data");
        let mutex = Mutex::new(client.clone(), key.as_str()).ttl(Duration::from_millis(600));
        let guard = mutex.lock().unwrap();
        let added: i64 = guard.guard(&hset(&data)).unwrap();
        assert_eq!(added, 1);
        // Past the first lease: the keep-alive extended it on the right node.
        std::thread::sleep(Duration::from_millis(800));
        assert!(!guard.is_lost());
        let info = mutex.info().unwrap().unwrap();
        assert_eq!(info.holder.as_deref(), Some(guard.token()));
        assert_eq!(info.mode, Mode::Exclusive);
        let busy = mutex.clone().wait(Duration::from_millis(100)).lock();
        assert!(matches!(busy, Err(Error::Timeout)), "{busy:?}");
        assert!(guard.release().unwrap());

        let amutex = aio::Mutex::new(client.clone(), key.as_str());
        rt.block_on(async {
            let guard = amutex.lock().await.unwrap();
            let _: i64 = guard.guard(&hset(&data)).await.unwrap();
            assert_eq!(amutex.holders().await.unwrap()[0].token, guard.token());
            assert!(guard.release().await.unwrap());
            assert_eq!(amutex.info().await.unwrap(), None);
        });

        // No replicas: the lock's node says so, and the grant is given back.
        let durable = Mutex::new(client, key.as_str()).durable(1, Duration::from_millis(50));
        match durable.lock() {
            Err(Error::NotDurable {
                acked: 0,
                required: 1,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(mutex.info().unwrap(), None);
    }
}
