//! The command table: each `LOCK.*` command's name, flags and handler, registered with
//! Redis, and the C entry point through which Redis calls the handler.
//!
//! The crate's command list hands a handler its arguments as a fresh `Vec<RedisString>`,
//! retaining every argument and releasing it again after the call: on an acquire + release
//! cycle that was about 6% of the server's instructions (callgrind). Here a handler borrows
//! the argument vector Redis passed, for the length of the call, as a C module does.

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;

use redis_module::{raw, Context, RedisResult, RedisString};

use crate::commands;

type Handler = fn(&Context, &[RedisString]) -> RedisResult;

struct Command {
    name: &'static CStr,
    flags: &'static CStr,
    handler: Handler,
}

/// Every command has its key at position 1 (first key 1, last key 1, step 1).
const COMMANDS: [Command; 6] = [
    Command {
        name: c"lock.acquire",
        flags: c"write deny-oom fast blocking",
        handler: commands::acquire,
    },
    Command {
        name: c"lock.release",
        flags: c"write deny-oom fast",
        handler: commands::release,
    },
    Command {
        name: c"lock.extend",
        flags: c"write deny-oom fast",
        handler: commands::extend,
    },
    Command {
        name: c"lock.fence",
        flags: c"write deny-oom fast",
        handler: commands::fence,
    },
    Command {
        name: c"lock.info",
        flags: c"readonly fast",
        handler: commands::info,
    },
    Command {
        name: c"lock.apply",
        flags: c"write",
        handler: commands::apply,
    },
];

/// The ACL category of every command, added by `redis_module!` where the server supports
/// module categories (7.4 and later).
const CATEGORY: &CStr = c"lock";

/// The longest argument vector passed without a heap allocation; no valid call is longer.
const INLINE_ARGS: usize = 8;

/// Registers every command, with its ACL category where the server has the API.
pub fn register(ctx: &Context) -> Result<(), String> {
    let entries: [raw::RedisModuleCmdFunc; 6] = [
        Some(entry::<0>),
        Some(entry::<1>),
        Some(entry::<2>),
        Some(entry::<3>),
        Some(entry::<4>),
        Some(entry::<5>),
    ];
    for (command, entry) in COMMANDS.iter().zip(entries) {
        let name = command.name.to_string_lossy();
        // SAFETY: ctx.ctx is the OnLoad context; the strings are NUL-terminated statics and
        // `entry` is a function with the signature Redis calls.
        let status = unsafe {
            raw::RedisModule_CreateCommand.unwrap()(
                ctx.ctx,
                command.name.as_ptr(),
                entry,
                command.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("failed to create command {name}"));
        }
        // SAFETY: as above; the command was just created, so GetCommand finds it. The API
        // table is filled in before OnLoad runs and not written after.
        unsafe {
            let Some(set_categories) = raw::RedisModule_SetCommandACLCategories else {
                continue;
            };
            let handle = raw::RedisModule_GetCommand.unwrap()(ctx.ctx, command.name.as_ptr());
            if handle.is_null() {
                return Err(format!("failed to look up command {name}"));
            }
            if set_categories(handle, CATEGORY.as_ptr()) != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!(
                    "failed to put command {name} in ACL category lock"
                ));
            }
        }
    }
    Ok(())
}

/// The C entry point of command `I` of `COMMANDS`.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
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

fn as_strings(args: &[ManuallyDrop<RedisString>]) -> &[RedisString] {
    // SAFETY: ManuallyDrop<T> is repr(transparent) over T, so the slices have one layout.
    unsafe { &*(args as *const [ManuallyDrop<RedisString>] as *const [RedisString]) }
}
