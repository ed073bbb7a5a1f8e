//! How the clients take their locks and what the servers run with: the one place where a
//! mode (durable grants, module settings, `min-replicas-to-write`) changes the run.

use redis_lock_client::Mutex;

/// How the clients take their locks, and what the servers run with. Plain: the client
/// library's defaults, the module's defaults. Durable modes (the library's `durable(n, t)`)
/// and module settings slot in here as further variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "plain" => Ok(Mode::Plain),
            other => Err(format!("unknown mode {other:?} (known: plain)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
        }
    }

    /// Extra arguments for every data server.
    pub fn server_args(self) -> Vec<String> {
        match self {
            Mode::Plain => Vec::new(),
        }
    }

    /// The lock as the clients take it.
    pub fn lock(self, mutex: Mutex) -> Mutex {
        match self {
            Mode::Plain => mutex,
        }
    }
}
