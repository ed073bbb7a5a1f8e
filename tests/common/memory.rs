//! The server's memory as `INFO memory` reports it.

use redis::Connection;

use super::info_int;

/// `used_memory`: what the allocator has handed out, size classes included.
pub fn used_memory(con: &mut Connection) -> i64 {
    info_int(con, "memory", "used_memory")
}

/// `used_memory` less what the clients' buffers take (`mem_clients_normal`), which varies with
/// the size of the last command or payload and is not the keys' cost. Both fields come from
/// one `INFO` reply, so that they describe the same instant.
pub fn used_memory_less_clients(con: &mut Connection) -> i64 {
    let text: String = redis::cmd("INFO")
        .arg("memory")
        .query(con)
        .expect("INFO memory");
    let field = |f: &str| -> i64 {
        let prefix = format!("{f}:");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("INFO memory has no {f}"))
    };
    field("used_memory") - field("mem_clients_normal")
}
