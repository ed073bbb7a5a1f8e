//! What `COMMAND INFO` and `COMMAND DOCS` say of each command: arity (which the server then
//! checks itself, with its standard message), key specs, arguments, summary and complexity.
//! `RedisModule_SetCommandInfo` exists from Redis 7.0; the crate's `#[command]` macro also
//! calls a 7.2-only function, so this module sets the info itself.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context};

struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    /// The keyword that introduces the argument (`WAIT`), if any.
    token: Option<&'static CStr>,
    optional: bool,
}

struct Doc {
    name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: c_int,
    key_flags: u32,
    args: &'static [Arg],
}

const KEY: Arg = Arg {
    name: c"key",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
    token: None,
    optional: false,
};
const TOKEN: Arg = Arg {
    name: c"token",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    optional: false,
};
const TTL: Arg = Arg {
    name: c"ttl",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    optional: false,
};
const WAIT: Arg = Arg {
    name: c"timeout",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"WAIT"),
    optional: true,
};
const DEADLINE: Arg = Arg {
    name: c"deadline",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    token: None,
    optional: false,
};
const FENCE: Arg = Arg {
    name: c"fence",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    optional: false,
};

const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;

const DOCS: [Doc; 6] = [
    Doc {
        name: c"lock.acquire",
        summary: c"Acquires a lock for a token with a lease of ttl milliseconds and returns its fence; with WAIT, queues until granted or timeout",
        complexity: c"O(1); O(N) to leave a queue of N waiters",
        arity: -4,
        key_flags: RW | ACCESS | UPDATE,
        args: &[KEY, TOKEN, TTL, WAIT],
    },
    Doc {
        name: c"lock.release",
        summary: c"Releases a lock held by the token; the first waiter holds it next",
        complexity: c"O(1)",
        arity: 3,
        key_flags: RW | DELETE,
        args: &[KEY, TOKEN],
    },
    Doc {
        name: c"lock.extend",
        summary: c"Sets the remaining lease of a lock held by the token to ttl milliseconds",
        complexity: c"O(1)",
        arity: 4,
        key_flags: RW | UPDATE,
        args: &[KEY, TOKEN, TTL],
    },
    Doc {
        name: c"lock.fence",
        summary: c"Issues a new, larger fence to the token holding the lock",
        complexity: c"O(1)",
        arity: 3,
        key_flags: RW | ACCESS | UPDATE,
        args: &[KEY, TOKEN],
    },
    Doc {
        name: c"lock.info",
        summary: c"Returns a lock's holder, last fence, remaining lease and number of waiters",
        complexity: c"O(1)",
        arity: 2,
        key_flags: RO | ACCESS,
        args: &[KEY],
    },
    Doc {
        name: c"lock.apply",
        summary: c"Internal: sets a lock's state as the master propagated it (refused from clients)",
        complexity: c"O(1)",
        arity: 5,
        key_flags: OW | UPDATE,
        args: &[KEY, TOKEN, DEADLINE, FENCE],
    },
];

static VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

fn raw_arg(arg: Option<&Arg>) -> raw::RedisModuleCommandArg {
    let (name, kind, token, key_spec_index, flags) = match arg {
        Some(a) => (
            a.name.as_ptr(),
            a.kind,
            a.token.map_or(ptr::null(), CStr::as_ptr),
            if a.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY {
                0
            } else {
                -1
            },
            if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            },
        ),
        // The terminating entry: a NULL name.
        None => (ptr::null(), 0, ptr::null(), -1, 0),
    };
    raw::RedisModuleCommandArg {
        name,
        type_: kind,
        key_spec_index,
        token,
        summary: ptr::null(),
        since: ptr::null(),
        flags,
        deprecated_since: ptr::null(),
        subargs: ptr::null_mut(),
        display_text: ptr::null(),
    }
}

/// The one key spec every command has: the key is argument 1. Without flags it is the
/// terminating entry (begin-search type 0).
fn key_spec(flags: Option<u32>) -> raw::RedisModuleCommandKeySpec {
    let (begin, find) = match flags {
        Some(_) => (
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        ),
        None => (0, 0),
    };
    raw::RedisModuleCommandKeySpec {
        notes: ptr::null(),
        flags: u64::from(flags.unwrap_or(0)),
        begin_search_type: begin,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: find,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}

/// Sets the info of every command; call after they are created.
pub fn describe(ctx: &Context) -> Result<(), String> {
    for doc in &DOCS {
        let mut key_specs = [key_spec(Some(doc.key_flags)), key_spec(None)];
        let mut args: Vec<raw::RedisModuleCommandArg> = doc
            .args
            .iter()
            .map(Some)
            .chain([None])
            .map(raw_arg)
            .collect();
        let mut info = raw::RedisModuleCommandInfo {
            version: &VERSION,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: c"0.1.0".as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: doc.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        };
        // SAFETY: ctx.ctx is the OnLoad context; the name is NUL-terminated. Every pointer in
        // `info` points into statics or into `key_specs`/`args`, which outlive the call, and
        // both arrays end with the terminating entry the API expects. Redis copies what it
        // keeps.
        let status = unsafe {
            let command = raw::RedisModule_GetCommand.unwrap()(ctx.ctx, doc.name.as_ptr());
            if command.is_null() {
                return Err(format!("command {:?} not found", doc.name));
            }
            raw::RedisModule_SetCommandInfo.unwrap()(command, &mut info)
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("SetCommandInfo failed for {:?}", doc.name));
        }
    }
    Ok(())
}
