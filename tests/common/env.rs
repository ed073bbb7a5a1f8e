//! Settings the tests read from the environment (`FUZZ_SEED`, `MODEL_OPS`, …).

/// The variable `name` as an integer; `default` when it is not set or not an integer.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
