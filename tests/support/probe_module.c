/*
 * probe_module: a tiny Redis/Valkey module for tests/guard_server.rs. It registers one
 * command, `probe.cmd`, that replies +PROBED, with the command flags given as the first
 * load argument (one argument, flags separated by spaces):
 *
 *     MODULE LOAD /path/probe_module.so "write deny-script"
 *
 * (no argument: "write"). Loading and unloading it changes the server's command table while
 * the server runs, which `LOCK.GUARD` must notice (its cache of command classes is forgotten
 * on every module load and unload).
 *
 * It needs no redismodule.h: the few API entry points it uses are declared here and looked
 * up through the GetApi function the server leaves at the start of the context, exactly as
 * redismodule.h's RedisModule_Init does.
 *
 * Build: cc -shared -fPIC -O2 -o probe_module.so probe_module.c
 */

#include <stddef.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

static int (*RedisModule_GetApi)(const char *name, void *out);
static void (*RedisModule_SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver,
                                            int apiver);
static int (*RedisModule_IsModuleNameBusy)(const char *name);
static int (*RedisModule_CreateCommand)(RedisModuleCtx *ctx, const char *name,
                                        RedisModuleCmdFunc cmdfunc, const char *strflags,
                                        int firstkey, int lastkey, int keystep);
static int (*RedisModule_ReplyWithSimpleString)(RedisModuleCtx *ctx, const char *msg);
static const char *(*RedisModule_StringPtrLen)(const RedisModuleString *str, size_t *len);

#define GET_API(name) RedisModule_GetApi("RedisModule_" #name, (void *)&RedisModule_##name)

/* What redismodule.h's RedisModule_Init does, for the entry points above. */
static int probe_init(RedisModuleCtx *ctx, const char *name, int ver, int apiver) {
    void *getapi = ((void **)ctx)[0];
    RedisModule_GetApi = (int (*)(const char *, void *))(unsigned long)getapi;
    if (GET_API(SetModuleAttribs) != REDISMODULE_OK ||
        GET_API(CreateCommand) != REDISMODULE_OK ||
        GET_API(ReplyWithSimpleString) != REDISMODULE_OK ||
        GET_API(StringPtrLen) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    /* Optional, as in redismodule.h. */
    if (GET_API(IsModuleNameBusy) != REDISMODULE_OK) RedisModule_IsModuleNameBusy = NULL;
    if (RedisModule_IsModuleNameBusy && RedisModule_IsModuleNameBusy(name)) return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, ver, apiver);
    return REDISMODULE_OK;
}

static int probe_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    return RedisModule_ReplyWithSimpleString(ctx, "PROBED");
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (probe_init(ctx, "probe", 1, REDISMODULE_APIVER_1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    const char *flags = argc > 0 ? RedisModule_StringPtrLen(argv[0], NULL) : "write";
    if (RedisModule_CreateCommand(ctx, "probe.cmd", probe_cmd, flags, 0, 0, 0) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
