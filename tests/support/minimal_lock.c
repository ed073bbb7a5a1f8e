/*
 * minimal_lock: the least a lock that is a module data type costs the server, for the
 * bench's "module floor" (workloads 1 and 10a). It is not redis-lock and does not try to be:
 * no waiters, no shared holds, no replication of its own, no lease timer.
 *
 *     MINLOCK.ACQUIRE key token ttl-ms   -> a 16-digit fence, or nil if the key is taken
 *     MINLOCK.RELEASE key token          -> 1 if token held it (the key is deleted), else 0
 *
 * The lock is one allocation (the fence, then the token), stored with ModuleTypeSetValue;
 * its lease is the key's own TTL (RedisModule_SetExpire), as `SET PX` keeps it, so the
 * server's expiry ends it. Each command reads its arguments, opens the key once, checks the
 * type, announces a module keyspace event and replies as `LOCK.ACQUIRE`/`LOCK.RELEASE` do:
 * the work every module lock pays on top of `SET PX` + `DEL`. tests/minimal_lock.rs checks
 * that it locks.
 *
 * It saves to and loads from RDB, but has no AOF rewrite callback: load it only on a server
 * whose AOF is off (the bench does).
 *
 * No redismodule.h (see probe_module.c): the entry points are looked up through GetApi.
 *
 * Build: cc -shared -fPIC -O2 -o minimal_lock.so minimal_lock.c
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1
#define REDISMODULE_TYPE_METHOD_VERSION 1
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_NOTIFY_MODULE (1 << 13)

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleType RedisModuleType;
typedef struct RedisModuleIO RedisModuleIO;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* The first fields of redismodule.h's RedisModuleTypeMethods (version 1). */
typedef struct {
    uint64_t version;
    void *(*rdb_load)(RedisModuleIO *rdb, int encver);
    void (*rdb_save)(RedisModuleIO *rdb, void *value);
    void (*aof_rewrite)(void *aof, RedisModuleString *key, void *value);
    size_t (*mem_usage)(const void *value);
    void (*digest)(void *digest, void *value);
    void (*free)(void *value);
} TypeMethods;

static int (*RedisModule_GetApi)(const char *name, void *out);
static void (*RedisModule_SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver,
                                            int apiver);
static int (*RedisModule_CreateCommand)(RedisModuleCtx *ctx, const char *name,
                                        RedisModuleCmdFunc cmdfunc, const char *strflags,
                                        int firstkey, int lastkey, int keystep);
static RedisModuleType *(*RedisModule_CreateDataType)(RedisModuleCtx *ctx, const char *name,
                                                      int encver, void *typemethods);
static void *(*RedisModule_OpenKey)(RedisModuleCtx *ctx, RedisModuleString *key, int mode);
static void (*RedisModule_CloseKey)(RedisModuleKey *kp);
static int (*RedisModule_KeyType)(RedisModuleKey *kp);
static RedisModuleType *(*RedisModule_ModuleTypeGetType)(RedisModuleKey *key);
static void *(*RedisModule_ModuleTypeGetValue)(RedisModuleKey *key);
static int (*RedisModule_ModuleTypeSetValue)(RedisModuleKey *key, RedisModuleType *mt,
                                             void *value);
static int (*RedisModule_SetExpire)(RedisModuleKey *key, long long expire);
static int (*RedisModule_DeleteKey)(RedisModuleKey *key);
static int (*RedisModule_NotifyKeyspaceEvent)(RedisModuleCtx *ctx, int type, const char *event,
                                              RedisModuleString *key);
static int (*RedisModule_ReplyWithLongLong)(RedisModuleCtx *ctx, long long ll);
static int (*RedisModule_ReplyWithNull)(RedisModuleCtx *ctx);
static int (*RedisModule_ReplyWithError)(RedisModuleCtx *ctx, const char *err);
static int (*RedisModule_WrongArity)(RedisModuleCtx *ctx);
static const char *(*RedisModule_StringPtrLen)(const RedisModuleString *str, size_t *len);
static int (*RedisModule_StringToLongLong)(const RedisModuleString *str, long long *ll);
static void *(*RedisModule_Alloc)(size_t bytes);
static void (*RedisModule_Free)(void *ptr);
static void (*RedisModule_SaveStringBuffer)(RedisModuleIO *io, const char *str, size_t len);
static char *(*RedisModule_LoadStringBuffer)(RedisModuleIO *io, size_t *lenptr);

#define GET_API(name) RedisModule_GetApi("RedisModule_" #name, (void *)&RedisModule_##name)

static RedisModuleType *lock_type;

/* Fences start at 10^15, so that every reply has 16 digits as redis-lock's do. */
static long long last_fence = 1000000000000000LL;

typedef struct {
    long long fence;
    size_t token_len;
    char token[];
} Lock;

static Lock *lock_new(long long fence, const char *token, size_t len) {
    Lock *l = RedisModule_Alloc(sizeof(Lock) + len);
    l->fence = fence;
    l->token_len = len;
    memcpy(l->token, token, len);
    return l;
}

static int held_by(const Lock *l, const char *token, size_t len) {
    return l->token_len == len && memcmp(l->token, token, len) == 0;
}

static int acquire(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long ttl;
    if (RedisModule_StringToLongLong(argv[3], &ttl) != REDISMODULE_OK || ttl <= 0)
        return RedisModule_ReplyWithError(ctx, "ERR ttl must be a positive integer");
    size_t len;
    const char *token = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int reply;
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        reply = RedisModule_ModuleTypeGetType(key) == lock_type
                    ? RedisModule_ReplyWithNull(ctx)
                    : RedisModule_ReplyWithError(
                          ctx, "WRONGTYPE Operation against a key holding the wrong kind of value");
    } else {
        long long fence = ++last_fence;
        RedisModule_ModuleTypeSetValue(key, lock_type, lock_new(fence, token, len));
        RedisModule_SetExpire(key, ttl);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "minlock.acquired",
                                        argv[1]);
        reply = RedisModule_ReplyWithLongLong(ctx, fence);
    }
    RedisModule_CloseKey(key);
    return reply;
}

static int release(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *token = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    long long released = 0;
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY &&
        RedisModule_ModuleTypeGetType(key) == lock_type &&
        held_by(RedisModule_ModuleTypeGetValue(key), token, len)) {
        RedisModule_DeleteKey(key);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "minlock.released",
                                        argv[1]);
        released = 1;
    }
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, released);
}

static void lock_free(void *value) { RedisModule_Free(value); }

static void lock_save(RedisModuleIO *io, void *value) {
    Lock *l = value;
    RedisModule_SaveStringBuffer(io, (const char *)&l->fence, sizeof l->fence);
    RedisModule_SaveStringBuffer(io, l->token, l->token_len);
}

static void *lock_load(RedisModuleIO *io, int encver) {
    (void)encver;
    size_t flen, tlen;
    char *fence = RedisModule_LoadStringBuffer(io, &flen);
    char *token = RedisModule_LoadStringBuffer(io, &tlen);
    long long f = 0;
    if (flen == sizeof f) memcpy(&f, fence, sizeof f);
    Lock *l = lock_new(f, token, tlen);
    RedisModule_Free(fence);
    RedisModule_Free(token);
    return l;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    RedisModule_GetApi = (int (*)(const char *, void *))(unsigned long)((void **)ctx)[0];
    if (GET_API(SetModuleAttribs) || GET_API(CreateCommand) || GET_API(CreateDataType) ||
        GET_API(OpenKey) || GET_API(CloseKey) || GET_API(KeyType) ||
        GET_API(ModuleTypeGetType) || GET_API(ModuleTypeGetValue) ||
        GET_API(ModuleTypeSetValue) || GET_API(SetExpire) || GET_API(DeleteKey) ||
        GET_API(NotifyKeyspaceEvent) || GET_API(ReplyWithLongLong) || GET_API(ReplyWithNull) ||
        GET_API(ReplyWithError) || GET_API(WrongArity) || GET_API(StringPtrLen) ||
        GET_API(StringToLongLong) || GET_API(Alloc) || GET_API(Free) ||
        GET_API(SaveStringBuffer) || GET_API(LoadStringBuffer))
        return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, "minlock", 1, REDISMODULE_APIVER_1);
    TypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = lock_load,
        .rdb_save = lock_save,
        .free = lock_free,
    };
    lock_type = RedisModule_CreateDataType(ctx, "minlock-1", 0, &tm);
    if (lock_type == NULL) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "minlock.acquire", acquire, "write deny-oom fast", 1, 1,
                                  1) ||
        RedisModule_CreateCommand(ctx, "minlock.release", release, "write fast", 1, 1, 1))
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
