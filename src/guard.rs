//! What `LOCK.GUARD` needs from the server to run a command as if its caller had sent it:
//! which commands may be guarded, the keys a guarded call declares, and the call itself.
//!
//! - **Which commands.** `COMMAND INFO` says whether a command blocks or is kept from
//!   scripts; for a container command (`CONFIG`, `CLIENT`, `OBJECT`…), whether its
//!   subcommand does (`COMMAND INFO config|set`). It is asked once per command or
//!   subcommand name and the answer remembered, until a module is loaded or unloaded (the
//!   only way the command table changes while the server runs). Only names the server knows
//!   are remembered, so the table stays as small as the server's.
//! - **Keys.** The command is flagged `getkeys-api`: asked for its keys, `LOCK.GUARD`
//!   declares the lock key and then whatever the server finds in the guarded command, with
//!   that command's own flags. So ACL key patterns, `COMMAND GETKEYS` and the cluster's slot
//!   check see every key the call touches.
//! - **The call.** `RedisModule_Call` runs the command as the caller's ACL user (`C`), with
//!   the rules a script obeys (`S`: no `noscript` command, no write without enough good
//!   replicas or on a disk error), refusing `deny-oom` commands over `maxmemory` (`M`),
//!   replying in the caller's protocol (`0`), with errors as replies (`E`), and propagating
//!   the command — and only it — to replicas and the AOF (`!`).

use std::collections::HashMap;
use std::os::raw::{c_char, c_int};
use std::sync::Mutex;

use redis_module::{raw, Context, RedisString};

use crate::error::{LockError, Unguardable};
use crate::hashing::FnvBuild;

/// What `COMMAND INFO` says of a command, as far as guarding it goes.
#[derive(Debug, Clone, Copy)]
struct Class {
    arity: i64,
    blocking: bool,
    noscript: bool,
    /// It has subcommands, which have flags of their own (`CONFIG`, `CLIENT`, `OBJECT`…).
    container: bool,
}

/// Commands already asked about, by lowercased name; a subcommand as `COMMAND INFO` names
/// it, `container|subcommand`.
static CLASSES: Mutex<Option<Classes>> = Mutex::new(None);

/// FNV rather than SipHash: the table is looked up on every guarded call, and only the
/// server's own command names are ever inserted, so there is nothing for a hash-flooding
/// client to fill.
type Classes = HashMap<Box<[u8]>, Class, FnvBuild>;

/// Forgets what was learned of commands: a module was loaded or unloaded.
pub fn forget_commands() {
    *CLASSES.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The first argument of a guarded call, lowercased on the stack when it is short (every
/// command name is).
struct Name {
    buf: [u8; 32],
    long: Vec<u8>,
    len: usize,
}

impl Name {
    fn of(bytes: &[u8]) -> Name {
        let mut name = Name {
            buf: [0; 32],
            long: Vec::new(),
            len: bytes.len(),
        };
        if bytes.len() <= name.buf.len() {
            name.buf[..bytes.len()].copy_from_slice(bytes);
            name.buf[..bytes.len()].make_ascii_lowercase();
        } else {
            name.long = bytes.to_ascii_lowercase();
        }
        name
    }

    fn lower(&self) -> &[u8] {
        if self.long.is_empty() {
            &self.buf[..self.len]
        } else {
            &self.long
        }
    }
}

/// A command name as an error message may show it: at most 128 bytes, printable ASCII,
/// anything else escaped (the reply must stay one line of text, and the crate refuses NULs).
fn shown(name: &RedisString) -> String {
    let bytes = name.as_slice();
    let mut s = String::new();
    for &b in &bytes[..bytes.len().min(128)] {
        match b {
            b' '..=b'~' if b != b'\\' => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

fn is_lock_command(lower: &[u8]) -> bool {
    lower.starts_with(b"lock.")
}

/// Refuses a command `LOCK.GUARD` must not run, before the lock is looked at: an unknown
/// one, a wrong number of arguments, a blocking command, one scripts may not run, and
/// `LOCK.*`. `inner` is the command and its arguments. A container command (`CONFIG`,
/// `CLIENT`, `OBJECT`…) is judged by its subcommand's own arity and flags, as the server
/// judges it when it runs: `CONFIG GET` is refused where `OBJECT ENCODING` runs.
pub fn check(ctx: &Context, inner: &[RedisString]) -> Result<(), LockError> {
    let Some(first) = inner.first() else {
        return Err(LockError::Arity);
    };
    let spelled = || shown(first);
    let name = Name::of(first.as_slice());
    if is_lock_command(name.lower()) {
        return Err(LockError::Unguardable(spelled(), Unguardable::LockCommand));
    }
    // `config|set` is how `COMMAND INFO` names a subcommand; no call runs it by that name.
    let class = if name.lower().contains(&b'|') {
        None
    } else {
        class_of(ctx, name.lower())
    };
    let Some(class) = class else {
        return Err(LockError::Unguardable(spelled(), Unguardable::Unknown));
    };
    check_arity(class, inner, spelled)?;
    match (class.container, inner.get(1)) {
        (true, Some(sub)) => {
            let spelled = || format!("{}|{}", shown(first), shown(sub));
            let full = [name.lower(), b"|", &sub.as_slice().to_ascii_lowercase()].concat();
            let class = if sub.as_slice().contains(&b'|') {
                None
            } else {
                class_of(ctx, &full)
            };
            let Some(class) = class else {
                return Err(LockError::Unguardable(spelled(), Unguardable::Unknown));
            };
            check_arity(class, inner, spelled)?;
            check_flags(class, spelled)
        }
        _ => check_flags(class, spelled),
    }
}

/// The command's own arity (a subcommand's counts its container's name too).
fn check_arity(
    class: Class,
    inner: &[RedisString],
    spelled: impl Fn() -> String,
) -> Result<(), LockError> {
    let argc = inner.len() as i64;
    if (class.arity > 0 && argc != class.arity) || argc < -class.arity {
        return Err(LockError::Unguardable(spelled(), Unguardable::Arity));
    }
    Ok(())
}

fn check_flags(class: Class, spelled: impl Fn() -> String) -> Result<(), LockError> {
    if class.blocking {
        return Err(LockError::Unguardable(spelled(), Unguardable::Blocks));
    }
    if class.noscript {
        return Err(LockError::Unguardable(spelled(), Unguardable::NotInScripts));
    }
    Ok(())
}

fn class_of(ctx: &Context, lower: &[u8]) -> Option<Class> {
    {
        let classes = CLASSES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(class) = classes.as_ref().and_then(|c| c.get(lower)) {
            return Some(*class);
        }
    }
    // Not under the mutex: the call runs a command, which could reach this module again.
    let class = ask_server(ctx, lower)?;
    CLASSES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Classes::default)
        .insert(lower.into(), class);
    Some(class)
}

/// `COMMAND INFO name`: `None` for a command the server does not know.
fn ask_server(ctx: &Context, lower: &[u8]) -> Option<Class> {
    // SAFETY: ctx.ctx is the live context of the running command. The format "cb" takes a
    // NUL-terminated C string and a buffer with its length, which both outlive the call.
    let reply = unsafe {
        raw::RedisModule_Call.unwrap()(
            ctx.ctx,
            c"COMMAND".as_ptr(),
            c"cb".as_ptr(),
            c"INFO".as_ptr(),
            lower.as_ptr().cast::<c_char>(),
            lower.len(),
        )
    };
    if reply.is_null() {
        return None;
    }
    let class = Reply(reply).class();
    // SAFETY: `reply` came from RedisModule_Call and is freed once, here.
    unsafe { raw::RedisModule_FreeCallReply.unwrap()(reply) };
    class
}

/// A borrowed call reply (or an element of one), read with the module API.
#[derive(Clone, Copy)]
struct Reply(*mut raw::RedisModuleCallReply);

impl Reply {
    fn kind(self) -> c_int {
        // SAFETY: self.0 is a live reply or element (checked non-null where made).
        unsafe { raw::RedisModule_CallReplyType.unwrap()(self.0) }
    }

    fn element(self, i: usize) -> Option<Reply> {
        if self.kind() != raw::REDISMODULE_REPLY_ARRAY as c_int {
            return None;
        }
        // SAFETY: as in `kind`; an index out of range gives NULL.
        let element = unsafe { raw::RedisModule_CallReplyArrayElement.unwrap()(self.0, i) };
        (!element.is_null()).then_some(Reply(element))
    }

    fn len(self) -> usize {
        // SAFETY: as in `kind`.
        unsafe { raw::RedisModule_CallReplyLength.unwrap()(self.0) }
    }

    fn is(self, text: &[u8]) -> bool {
        let mut len = 0;
        // SAFETY: as in `kind`.
        let ptr = unsafe { raw::RedisModule_CallReplyStringPtr.unwrap()(self.0, &mut len) };
        if ptr.is_null() {
            return false;
        }
        // SAFETY: the API returned `len` bytes at `ptr`, live while the reply is, which
        // outlives this comparison.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) == text }
    }

    fn integer(self) -> Option<i64> {
        (self.kind() == raw::REDISMODULE_REPLY_INTEGER as c_int)
            // SAFETY: as in `kind`.
            .then(|| unsafe { raw::RedisModule_CallReplyInteger.unwrap()(self.0) })
    }

    /// A `COMMAND INFO` reply: `[[name, arity, [flag …], first key, last key, step,
    /// [category …], [tip …], [key spec …], [subcommand …]]]`, or `[nil]`.
    fn class(self) -> Option<Class> {
        let entry = self.element(0)?;
        let arity = entry.element(1)?.integer()?;
        let flags = entry.element(2)?;
        let has =
            |flag: &[u8]| (0..flags.len()).any(|i| flags.element(i).is_some_and(|f| f.is(flag)));
        Some(Class {
            arity,
            blocking: has(b"blocking"),
            noscript: has(b"noscript"),
            container: entry.element(9).is_some_and(|subs| subs.len() > 0),
        })
    }
}

/// The raw strings of `args`, on the stack for a short call.
fn raw_argv(args: &[RedisString]) -> ArgvBuf {
    let mut buf = ArgvBuf {
        inline: [std::ptr::null_mut(); 16],
        heap: Vec::new(),
        len: args.len(),
    };
    if args.len() <= buf.inline.len() {
        for (slot, arg) in buf.inline.iter_mut().zip(args) {
            *slot = arg.inner;
        }
    } else {
        buf.heap = args.iter().map(|a| a.inner).collect();
    }
    buf
}

struct ArgvBuf {
    inline: [*mut raw::RedisModuleString; 16],
    heap: Vec<*mut raw::RedisModuleString>,
    len: usize,
}

impl ArgvBuf {
    fn as_mut_ptr(&mut self) -> *mut *mut raw::RedisModuleString {
        if self.heap.is_empty() {
            self.inline.as_mut_ptr()
        } else {
            self.heap.as_mut_ptr()
        }
    }
}

/// Answers the server's question of which keys `LOCK.GUARD key fence command …` (all of
/// `args`) touches: the lock key, read, then the guarded command's keys with their own
/// flags. An unknown or malformed guarded command declares none (the call is refused when
/// it runs).
pub fn declare_keys(ctx: &Context, args: &[RedisString]) {
    const LOCK_KEY: c_int =
        (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int;
    // The guarded command starts at this argument.
    const INNER: usize = 3;
    if args.len() < 2 {
        return;
    }
    // SAFETY: ctx.ctx is the key-position context the server made for this question.
    unsafe { raw::RedisModule_KeyAtPosWithFlags.unwrap()(ctx.ctx, 1, LOCK_KEY) };
    let Some(inner) = args.get(INNER..).filter(|inner| !inner.is_empty()) else {
        return;
    };
    // Asking the server for a LOCK.GUARD's keys would ask this function again.
    if is_lock_command(Name::of(inner[0].as_slice()).lower()) {
        return;
    }
    let mut argv = raw_argv(inner);
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: `argv` holds `inner.len()` live strings of this call; the out-pointers are
    // valid. The function only reads the strings.
    let positions = unsafe {
        raw::RedisModule_GetCommandKeysWithFlags.unwrap()(
            ctx.ctx,
            argv.as_mut_ptr(),
            argv.len as c_int,
            &mut count,
            &mut flags,
        )
    };
    if positions.is_null() {
        return;
    }
    let count = usize::try_from(count).unwrap_or(0);
    // SAFETY: a non-null result holds `count` positions, and `flags` as many flags.
    let (positions_s, flags_s) = unsafe {
        (
            std::slice::from_raw_parts(positions, count),
            std::slice::from_raw_parts(flags, count),
        )
    };
    for (&pos, &flag) in positions_s.iter().zip(flags_s) {
        // SAFETY: as above; positions are within `inner`, so shifted by INNER within args.
        unsafe { raw::RedisModule_KeyAtPosWithFlags.unwrap()(ctx.ctx, pos + INNER as c_int, flag) };
    }
    // SAFETY: both arrays were allocated by the server for the caller to free.
    unsafe {
        raw::RedisModule_Free.unwrap()(positions.cast());
        raw::RedisModule_Free.unwrap()(flags.cast());
    }
}

/// Why a call did not get as far as running its command, by `errno` (see
/// `RedisModule_Call`): unknown, arity, OOM or script rules, cluster, ACL, no user.
const NOT_RUN: [c_int; 9] = [
    libc::ENOENT,
    libc::EINVAL,
    libc::ENOSPC,
    libc::ESPIPE,
    libc::EPERM,
    libc::EROFS,
    libc::ENETDOWN,
    libc::ENOTSUP,
    libc::EACCES,
];

/// `RedisModule_Call(name, args)` with the flags of [`run`]. Up to four arguments go one
/// by one ("s" each): the server sizes its argument vector from the format, where a vector
/// ("v") costs it a reallocation, about 6% of a guarded `SET` (callgrind).
fn call(
    ctx: &Context,
    name: *const c_char,
    args: &[RedisString],
) -> *mut raw::RedisModuleCallReply {
    let a = |i: usize| args[i].inner;
    // SAFETY: the function pointer is set once at module load, before any command. ctx.ctx
    // is the live context of LOCK.GUARD; `name` is NUL-terminated (a known command name has
    // no NUL, `check` saw to that); each format has one "s" per string passed, or "v" with a
    // pointer and a length of live strings. The server only reads the strings and retains
    // them by reference count.
    unsafe {
        let call = raw::RedisModule_Call.unwrap();
        match args.len() {
            0 => call(ctx.ctx, name, c"!0CSME".as_ptr()),
            1 => call(ctx.ctx, name, c"s!0CSME".as_ptr(), a(0)),
            2 => call(ctx.ctx, name, c"ss!0CSME".as_ptr(), a(0), a(1)),
            3 => call(ctx.ctx, name, c"sss!0CSME".as_ptr(), a(0), a(1), a(2)),
            4 => call(
                ctx.ctx,
                name,
                c"ssss!0CSME".as_ptr(),
                a(0),
                a(1),
                a(2),
                a(3),
            ),
            _ => {
                let mut argv = raw_argv(args);
                call(
                    ctx.ctx,
                    name,
                    c"v!0CSME".as_ptr(),
                    argv.as_mut_ptr(),
                    argv.len,
                )
            }
        }
    }
}

/// Runs the guarded command (`inner`, checked by [`check`]) and sends its reply to the
/// caller. True if the command ran (whatever it replied), false if the server refused it.
pub fn run(ctx: &Context, inner: &[RedisString]) -> Result<bool, LockError> {
    let name = &inner[0];
    let mut c_name = [0u8; 64];
    let long;
    let name_ptr = if name.as_slice().len() < c_name.len() {
        c_name[..name.as_slice().len()].copy_from_slice(name.as_slice());
        c_name.as_ptr()
    } else {
        long = [name.as_slice(), b"\0"].concat();
        long.as_ptr()
    };
    // SAFETY: errno is this thread's; clearing it tells a refusal from a command that ran.
    unsafe { *libc::__errno_location() = 0 };
    let reply = call(ctx, name_ptr.cast::<c_char>(), &inner[1..]);
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    if reply.is_null() {
        return Err(LockError::Unguardable(shown(name), Unguardable::Unknown));
    }
    let denied =
        errno == libc::EACCES && Reply(reply).kind() == raw::REDISMODULE_REPLY_ERROR as c_int;
    if !denied {
        // SAFETY: `reply` is live; the caller's protocol is the one it was made in (`0`).
        unsafe { raw::RedisModule_ReplyWithCallReply.unwrap()(ctx.ctx, reply) };
    }
    // SAFETY: `reply` came from RedisModule_Call and is freed once, here.
    unsafe { raw::RedisModule_FreeCallReply.unwrap()(reply) };
    if denied {
        return Err(LockError::GuardNoPerm(shown(name)));
    }
    Ok(!NOT_RUN.contains(&errno))
}
