//! Sizes, durations and the run plan (`BENCH_QUICK`).

#[allow(unused_imports)]
use crate::*;

// Sizes and durations (the full run; BENCH_QUICK=1 divides them by about 10).

/// Connections of the throughput workloads (1, 2, 3, 6b, 7, 8, 10).
pub(crate) const CONNS: usize = 4;
/// Batch sizes (pipeline depths) of the uncontended workloads.
pub(crate) const DEPTHS: [usize; 2] = [1, 16];
/// Each variant of a throughput table runs this many times, interleaved with its baselines
/// (A B C, C B A, A B C), so that drift of the machine hits all of them alike.
pub(crate) const ROUNDS: usize = 5;
/// Rounds of the contended schemes and of 6b (which loads a million locks per round).
pub(crate) const FEW_ROUNDS: usize = 3;
/// Measurement window of one round of a throughput phase, after its warm-up.
pub(crate) const PHASE: Duration = Duration::from_secs(1);
pub(crate) const WARMUP: Duration = Duration::from_millis(300);
/// Lease of the uncontended workloads.
pub(crate) const TTL_MS: u64 = 60_000;
/// Lease of locks that must stay held for the rest of the run (memory, 1M held).
pub(crate) const HOLD_TTL_MS: u64 = 600_000;
/// Distinct lock names per connection in the cycle workloads (bounds the Lua fence keys).
pub(crate) const KEYSPACE: u64 = 50_000;

pub(crate) const CONTENDED_CLIENTS: usize = 20;
pub(crate) const CONTENDED_RUN: Duration = Duration::from_secs(3);
/// Lease in the contended workload: far longer than a hold, so it never runs out.
pub(crate) const CONTENDED_TTL_MS: u64 = 10_000;
pub(crate) const SLOW_POLL: Duration = Duration::from_millis(100);
pub(crate) const FAST_POLL: Duration = Duration::from_millis(1);
/// How long a pub/sub waiter waits for a message before it retries anyway. Redisson waits for
/// the lock's remaining lease; a shorter fallback can only help this baseline.
pub(crate) const PUBSUB_FALLBACK: Duration = Duration::from_millis(100);

pub(crate) const LEASE_TTL_MS: u64 = 50;
pub(crate) const LEASE_REPS: usize = 200;

pub(crate) const MEM_LOCKS: usize = 200_000;
pub(crate) const FEW_HELD: usize = 1_000;
pub(crate) const MANY_HELD: usize = 1_000_000;
/// Commands per pipeline when loading held locks.
pub(crate) const LOAD_BATCH: usize = 1_000;

/// Workload 11 (issue 22): shared holds on one key (11a: whose leases end at one instant;
/// 11b: the most holds a command is timed among, after 1 and `FEW_HELD`).
pub(crate) const MANY_HOLDS: usize = 50_000;
/// 11a's lease, unless loading that many holds took 11b so long that `EXEC` could come near
/// it (then twice that load, plus a second).
pub(crate) const STALL_TTL_MS: u64 = 3_000;
pub(crate) const STALL_ROUNDS: usize = 3;
/// How long before the deadline the `PING`s start.
pub(crate) const STALL_LEAD: Duration = Duration::from_millis(50);
/// Round trips that end from this long before the estimated deadline on (it is known to
/// about a millisecond) may have waited for the sweep.
pub(crate) const STALL_SLACK: Duration = Duration::from_millis(1);
/// A key still there this long after its leases' deadline fails the run.
pub(crate) const STALL_GIVE_UP: Duration = Duration::from_secs(60);
/// Issue 22: no turn of the event loop longer than a few ms however many holds end.
pub(crate) const STALL_GOAL_MS: f64 = 5.0;
/// Issue 22: a command on a key with many holds costs O(log H): at 50,000 holds at most this
/// many times its cost at 1 (the O(H) release before was at about 230× on the bench VM).
pub(crate) const COST_GOAL: f64 = 2.0;

/// Workload 12 (issue 25): connections blocked in `LOCK.OBSERVE` on one key, and as many
/// subscribed to its keyspace channel.
pub(crate) const OBSERVERS: usize = 1_000;
/// Changes per variant in each of workload 12's `ROUNDS` rounds (the observers re-blocked
/// before each).
pub(crate) const OBSERVE_CHANGES: usize = 40;

pub(crate) const LUA_RELEASE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";
pub(crate) const LUA_FENCED_ACQUIRE: &str =
    "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then \
     return redis.call('incr',KEYS[2]) else return false end";
/// The Lua guarded write (workload 7): the lock is a `SET NX PX` string (KEYS[1]) and a fence
/// key holding the fence integer (KEYS[2]); the write (`SET KEYS[3] ARGV[2]`) happens only if
/// the lock is held and ARGV[1] is its fence.
pub(crate) const LUA_GUARDED_SET: &str = "if redis.call('get',KEYS[1]) and \
     redis.call('get',KEYS[2])==ARGV[1] then return redis.call('set',KEYS[3],ARGV[2]) else \
     return redis.error_reply('FENCED the lock is not held under this fence') end";
pub(crate) const LUA_RELEASE_PUBLISH: &str = "if redis.call('get',KEYS[1])==ARGV[1] then \
     redis.call('del',KEYS[1]) redis.call('publish',ARGV[2],'released') return 1 else return 0 end";

/// The run's sizes, shrunk for `BENCH_QUICK=1`, and the workloads `BENCH_ONLY` selects.
pub(crate) struct Plan {
    pub(crate) quick: bool,
    /// `BENCH_ONLY=name,name,…`: run only these workloads (and their targets); empty: all.
    pub(crate) only: Vec<String>,
    /// Whether the pipelined phases' connections busy-poll (`Pipe::spinning`): when the
    /// client has a CPU of its own.
    pub(crate) spin: bool,
    pub(crate) phase: Duration,
    pub(crate) warmup: Duration,
    pub(crate) contended: Duration,
    pub(crate) lease_reps: usize,
    pub(crate) mem_locks: usize,
    pub(crate) few_held: usize,
    pub(crate) many_held: usize,
    pub(crate) many_holds: usize,
    pub(crate) observers: usize,
    pub(crate) observe_changes: usize,
}

impl Plan {
    /// The plan from the environment; `names` are the workloads `BENCH_ONLY` may name.
    pub(crate) fn from_env(names: &[&str]) -> Plan {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let div = if quick { 10 } else { 1 };
        let only: Vec<String> = std::env::var("BENCH_ONLY")
            .unwrap_or_default()
            .split(',')
            .map(|w| w.trim().to_string())
            .filter(|w| !w.is_empty())
            .collect();
        for w in &only {
            assert!(
                names.contains(&w.as_str()),
                "BENCH_ONLY: unknown workload {w:?}; expected a comma-separated list of {}",
                names.join(", ")
            );
        }
        Plan {
            quick,
            only,
            spin: false,
            phase: PHASE / div,
            warmup: WARMUP / div,
            contended: CONTENDED_RUN / div,
            lease_reps: LEASE_REPS / div as usize,
            mem_locks: MEM_LOCKS / div as usize,
            few_held: FEW_HELD,
            many_held: MANY_HELD / div as usize,
            many_holds: MANY_HOLDS / div as usize,
            observers: OBSERVERS,
            observe_changes: (OBSERVE_CHANGES / div as usize).max(2),
        }
    }

    /// Whether workload `name` runs.
    pub(crate) fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w == name)
    }
}
