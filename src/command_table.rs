//! The command table: each `LOCK.*` command described once — name, flags, arity, key spec,
//! arguments, summary, complexity and handler — registered with the server, and the C entry
//! point through which the server calls the handler.
//!
//! Arity and key specs go to `RedisModule_SetCommandInfo` (Redis 7.0 and later), so the
//! server checks arity itself with its standard message, and `COMMAND INFO`/`COMMAND DOCS`
//! describe the commands. The crate's command list hands a handler its arguments as a fresh
//! `Vec<RedisString>`, retaining every argument; here a handler borrows the argument vector
//! the server passed, for the length of the call, as a C module does.

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::ptr;

use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString};

use crate::commands;
use crate::error::LockError;
use crate::pause::{self, Cause};
use crate::{clock, stall, stats};

type Handler = fn(&Context, &[RedisString]) -> RedisResult;

struct Command {
    name: &'static CStr,
    /// As core commands are flagged: `deny-oom` only where the command allocates (like
    /// `SET`); releasing, extending and fencing must work on a full server, as `DEL` and
    /// `EXPIRE` do.
    flags: &'static CStr,
    arity: c_int,
    /// The key's flags; 0 for the one command without a key.
    key_flags: u32,
    args: &'static [Arg],
    summary: &'static CStr,
    complexity: &'static CStr,
    handler: Handler,
}

struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    /// The keyword that introduces the argument (`WAIT`), if any.
    token: Option<&'static CStr>,
    /// `REDISMODULE_CMD_ARG_OPTIONAL`, `…_MULTIPLE`.
    flags: u32,
}

const OPTIONAL: u32 = raw::REDISMODULE_CMD_ARG_OPTIONAL;
const MULTIPLE: u32 = raw::REDISMODULE_CMD_ARG_MULTIPLE;

const KEY: Arg = Arg {
    name: c"key",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
    token: None,
    flags: 0,
};
const TOKEN: Arg = Arg {
    name: c"token",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    flags: 0,
};
const TTL: Arg = Arg {
    name: c"ttl",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    flags: 0,
};
const WAIT: Arg = Arg {
    name: c"timeout",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"WAIT"),
    flags: OPTIONAL,
};
const SHARED: Arg = Arg {
    name: c"shared",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    token: Some(c"SHARED"),
    flags: OPTIONAL,
};
const LIMIT: Arg = Arg {
    name: c"limit",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"LIMIT"),
    flags: OPTIONAL,
};
const DEADLINE: Arg = Arg {
    name: c"deadline",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    token: None,
    flags: 0,
};
const SAVED_AT: Arg = Arg {
    name: c"saved_at",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
    token: None,
    flags: 0,
};
const FENCE: Arg = Arg {
    name: c"fence",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    flags: 0,
};
const EPOCH: Arg = Arg {
    name: c"epoch",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: Some(c"EPOCH"),
    flags: OPTIONAL,
};

const SEEN: Arg = Arg {
    name: c"seen",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    flags: 0,
};
const OBSERVE_TIMEOUT: Arg = Arg {
    name: c"timeout",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    token: None,
    flags: 0,
};

const COMMAND: Arg = Arg {
    name: c"command",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    flags: 0,
};
const ARG: Arg = Arg {
    name: c"arg",
    kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    token: None,
    flags: OPTIONAL | MULTIPLE,
};

const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;
/// The key's flags depend on the arguments: the server asks the command (`getkeys-api`).
const VARIABLE: u32 = raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS;

/// Every command but `LOCK.HIGHWATER` has its key at position 1 (first key 1, last key 1,
/// step 1).
const COMMANDS: &[Command] = &[
    Command {
        name: c"lock.acquire",
        flags: c"write deny-oom fast blocking",
        arity: -4,
        key_flags: RW | ACCESS | UPDATE,
        args: &[KEY, TOKEN, TTL, SHARED, LIMIT, WAIT],
        summary: c"Acquires a lock (exclusive, or SHARED while fewer than LIMIT tokens hold it) for a token with a lease of ttl milliseconds and returns its fence; with WAIT, queues until granted or timeout",
        complexity: c"O(1); O(H) on a key with H shared holds; O(N) to leave a queue of N waiters",
        handler: commands::acquire,
    },
    Command {
        name: c"lock.release",
        flags: c"write fast",
        arity: 3,
        key_flags: RW | DELETE,
        args: &[KEY, TOKEN],
        summary: c"Releases a lock held by the token; the first waiter holds it next",
        complexity: c"O(1); O(H) on a key with H shared holds",
        handler: commands::release,
    },
    Command {
        name: c"lock.extend",
        flags: c"write fast",
        arity: 4,
        key_flags: RW | UPDATE,
        args: &[KEY, TOKEN, TTL],
        summary: c"Sets the remaining lease of a lock held by the token to ttl milliseconds",
        complexity: c"O(1); O(H) on a key with H shared holds",
        handler: commands::extend,
    },
    Command {
        name: c"lock.fence",
        flags: c"write fast",
        arity: 3,
        key_flags: RW | ACCESS | UPDATE,
        args: &[KEY, TOKEN],
        summary: c"Issues a new, larger fence to the token holding the lock",
        complexity: c"O(1); O(H) on a key with H shared holds",
        handler: commands::fence,
    },
    Command {
        name: c"lock.info",
        flags: c"readonly fast",
        arity: 2,
        key_flags: RO | ACCESS,
        args: &[KEY],
        summary: c"Returns a lock's exclusive holder, last fence, remaining lease, waiters, mode and number of holders",
        complexity: c"O(1); O(H) on a key with H shared holds",
        handler: commands::info,
    },
    Command {
        name: c"lock.holders",
        flags: c"readonly",
        arity: 2,
        key_flags: RO | ACCESS,
        args: &[KEY],
        summary: c"Returns each holder of a lock, in the order granted: token, fence, remaining lease and mode",
        complexity: c"O(N) for N holders",
        handler: commands::holders,
    },
    Command {
        name: c"lock.observe",
        // Not `fast`: it may block, as `XREAD` is not.
        flags: c"readonly blocking",
        arity: 4,
        key_flags: RO | ACCESS,
        args: &[KEY, SEEN, OBSERVE_TIMEOUT],
        summary: c"Returns a lock's LOCK.INFO once the newest fence among its holds (0 if none) differs from seen: at once, or at the change; at the timeout in any case",
        complexity: c"O(1); O(H) on a key with H shared holds",
        handler: commands::observe,
    },
    Command {
        name: c"lock.guard",
        // Not `deny-oom`: the guarded command's own flag decides, when it runs. Not `fast`:
        // it runs whatever it guards. `getkeys-api`: the guarded command's keys are
        // declared too (see guard.rs).
        flags: c"write getkeys-api",
        arity: -4,
        key_flags: RO | ACCESS | VARIABLE,
        args: &[KEY, FENCE, COMMAND, ARG],
        summary: c"Runs a command only while the fence is the current fence of an exclusive, unexpired hold of the lock",
        complexity: c"O(1) plus the guarded command's complexity",
        handler: commands::guard,
    },
    Command {
        name: c"lock.apply",
        flags: c"write",
        arity: -5,
        key_flags: OW | UPDATE,
        args: &[KEY, TOKEN, DEADLINE, FENCE, SHARED],
        summary: c"Internal: sets one hold of a lock as the master propagated it (refused from clients)",
        complexity: c"O(1)",
        handler: commands::apply,
    },
    Command {
        name: c"lock.highwater",
        flags: c"write",
        arity: -3,
        key_flags: 0,
        args: &[FENCE, SAVED_AT, EPOCH],
        summary: c"Internal: the fence high-water mark and epoch, when an AOF rewrite began or the master was promoted (refused from clients)",
        complexity: c"O(1)",
        handler: commands::highwater,
    },
];

/// The ACL category of every command, added by `redis_module!` where the server supports
/// module categories (7.4 and later).
const CATEGORY: &CStr = c"lock";

/// The longest argument vector passed without a heap allocation: every call but a
/// `LOCK.GUARD` of a long command.
const INLINE_ARGS: usize = 10;

/// Registers every command with its flags, info and (where the server has the API) ACL
/// category.
pub fn register(ctx: &Context) -> Result<(), String> {
    for (command, entry) in COMMANDS.iter().zip(ENTRIES) {
        let name = command.name.to_string_lossy();
        let key = c_int::from(command.key_flags != 0);
        // SAFETY: ctx.ctx is the OnLoad context; the strings are NUL-terminated statics and
        // `entry` is a function with the signature Redis calls.
        let status = unsafe {
            raw::RedisModule_CreateCommand.unwrap()(
                ctx.ctx,
                command.name.as_ptr(),
                entry,
                command.flags.as_ptr(),
                key,
                key,
                key,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("failed to create command {name}"));
        }
        // SAFETY: as above; the command was just created, so GetCommand finds it.
        let handle =
            unsafe { raw::RedisModule_GetCommand.unwrap()(ctx.ctx, command.name.as_ptr()) };
        if handle.is_null() {
            return Err(format!("failed to look up command {name}"));
        }
        describe(handle, command).map_err(|()| format!("SetCommandInfo failed for {name}"))?;
        // SAFETY: the API table is filled in before OnLoad runs and not written after, so
        // reading the optional entry races with nothing.
        let set_categories = unsafe { raw::RedisModule_SetCommandACLCategories };
        if let Some(set_categories) = set_categories {
            // SAFETY: `handle` is the live command; the category is a NUL-terminated static.
            if unsafe { set_categories(handle, CATEGORY.as_ptr()) } != raw::REDISMODULE_OK as c_int
            {
                ctx.log_warning(&format!(
                    "failed to put command {name} in ACL category lock"
                ));
            }
        }
    }
    Ok(())
}

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
            a.flags as c_int,
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

/// Sets what `COMMAND INFO` and `COMMAND DOCS` say of `command`.
fn describe(handle: *mut raw::RedisModuleCommand, command: &Command) -> Result<(), ()> {
    let mut key_specs = match command.key_flags {
        0 => [key_spec(None), key_spec(None)],
        flags => [key_spec(Some(flags)), key_spec(None)],
    };
    let mut args: Vec<raw::RedisModuleCommandArg> = command
        .args
        .iter()
        .map(Some)
        .chain([None])
        .map(raw_arg)
        .collect();
    let mut info = raw::RedisModuleCommandInfo {
        version: &VERSION,
        summary: command.summary.as_ptr(),
        complexity: command.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: command.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    // SAFETY: `handle` is a live command of this module. Every pointer in `info` points into
    // statics or into `key_specs`/`args`, which outlive the call, and both arrays end with
    // the terminating entry the API expects. Redis copies what it keeps.
    let status = unsafe { raw::RedisModule_SetCommandInfo.unwrap()(handle, &mut info) };
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(())
    }
}

/// The C entry point of each row of `COMMANDS`, in order. Its length is the table's: a row
/// added without its entry point does not compile.
const ENTRIES: [raw::RedisModuleCmdFunc; COMMANDS.len()] = [
    Some(entry::<0>),
    Some(entry::<1>),
    Some(entry::<2>),
    Some(entry::<3>),
    Some(entry::<4>),
    Some(entry::<5>),
    Some(entry::<6>),
    Some(entry::<7>),
    Some(entry::<8>),
    Some(entry::<9>),
];

/// The C entry point of command `I` of `COMMANDS`.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    if let Some(refusal) = refused_after_stall(&context, &COMMANDS[I]) {
        return context.reply(Err(refusal)) as c_int;
    }
    let argc = usize::try_from(argc).unwrap_or(0);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() {
        &[]
    } else {
        // SAFETY: Redis passes `argc` string pointers that stay valid for the call.
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    // Borrowed, not owned: wrapped so that dropping them does not release Redis's strings.
    let wrap = |&arg: &*mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, arg))
    };
    let result = if argv.len() <= INLINE_ARGS {
        let mut inline: [ManuallyDrop<RedisString>; INLINE_ARGS] = std::array::from_fn(|_| {
            ManuallyDrop::new(RedisString::from_redis_module_string(
                ctx,
                std::ptr::null_mut(),
            ))
        });
        for (slot, arg) in inline.iter_mut().zip(argv) {
            *slot = wrap(arg);
        }
        (COMMANDS[I].handler)(&context, as_strings(&inline[..argv.len()]))
    } else {
        let args: Vec<_> = argv.iter().map(wrap).collect();
        (COMMANDS[I].handler)(&context, as_strings(&args))
    };
    context.reply(result) as c_int
}

/// A lock write on a master, in a turn of the event loop that began before a stall: the
/// server has not read yet which replicas left it meanwhile, so the write is refused and
/// writes paused (stall.rs). Before the handler, so that nothing changes. Never while the
/// server loads (an AOF read by `DEBUG LOADAOF` inside one long turn must replay whole).
fn refused_after_stall(ctx: &Context, command: &Command) -> Option<RedisError> {
    if !stall::watching() || !command.flags.to_bytes().starts_with(b"write") {
        return None;
    }
    let flags = ctx.get_flags();
    if !flags.contains(ContextFlags::MASTER) || flags.contains(ContextFlags::LOADING) {
        return None;
    }
    let ms = stall::within(clock::now().mono)?;
    pause::writes(ctx, Cause::Stall(ms));
    stats::STALL_REFUSALS.bump();
    Some(LockError::Stalled(ms).into())
}

fn as_strings(args: &[ManuallyDrop<RedisString>]) -> &[RedisString] {
    // SAFETY: ManuallyDrop<T> is repr(transparent) over T, so the slices have one layout.
    unsafe { &*(args as *const [ManuallyDrop<RedisString>] as *const [RedisString]) }
}
