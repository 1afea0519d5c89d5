/*
 * api_json: JSON bodies in and out, field-level validation and errors,
 * pagination parameters.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "lib/fmt.h"

void api_json(api_resp *rs, int status, cJSON *obj)
{
    free(rs->body);
    /* Most answers fit the first buffer: no regrowing while printing. */
    rs->body = obj ? cJSON_PrintBuffered(obj, 2048, 0) : NULL;
    cJSON_Delete(obj);
    if (!rs->body) {
        rs->status = 500;
        rs->body = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}");
    } else {
        rs->status = status;
    }
    rs->len = rs->body ? strlen(rs->body) : 0;
    rs->ctype = "application/json";
}

/*
 * Makes s valid UTF-8 in place: a sequence cut short (a name shortened with
 * %.64s, a message at its buffer's end) or otherwise broken becomes '?'s.
 * Error bodies are JSON whatever the input.
 */
static void utf8_mend(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                : (*p & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && !(len == 2 && *p < 0xC2);
        for (int i = 1; ok && i < len; i++)
            ok = (p[i] & 0xC0) == 0x80;
        if (!ok) {
            *p++ = '?';
            continue;
        }
        p += len;
    }
}

void api_error(api_resp *rs, int status, const char *code, const char *field, const char *fmt,
               ...)
{
    char msg[512], fld[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_mend(msg);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    if (field) {
        fmt_cut(fld, sizeof fld, "%s", field);
        utf8_mend(fld);
        cJSON_AddStringToObject(e, "field", fld);
    }
    rs->write_fn = NULL;
    rs->write_many = NULL;
    api_json(rs, status, o);
}

/* A JSON string escape \u0000 would be cut short by cJSON: refuse it. */
static int has_escaped_nul(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < n && !strncmp(s + i + 2, "0000", 4))
            return 1;
        i++; /* skip the escaped character */
    }
    return 0;
}

static int utf8_ok(const char *s)
{
    size_t n = strlen(s);
    return util_utf8_invalid_at(s, n) == n;
}

/* The first string under item (a member's name or a string value) that is
 * not UTF-8, its member path appended to path ("env.FOO", "args[2]"; path
 * holds n bytes).  NULL when every string is valid. */
static const cJSON *first_bad_utf8(const cJSON *item, char *path, size_t n)
{
    size_t used = strlen(path);
    int idx = 0;
    for (const cJSON *c = item->child; c; c = c->next, idx++) {
        if (cJSON_IsArray(item)) {
            fmt_cut(path + used, n - used, "[%d]", idx);
        } else if (!c->string || !utf8_ok(c->string)) {
            fmt_cut(path + used, n - used, "%s(a member's name)", used ? "." : "");
            return c;
        } else {
            fmt_cut(path + used, n - used, "%s%.64s", used ? "." : "", c->string);
        }
        if ((cJSON_IsString(c) && !utf8_ok(c->valuestring)) ||
            ((cJSON_IsArray(c) || cJSON_IsObject(c)) && first_bad_utf8(c, path, n)))
            return c;
        path[used] = '\0';
    }
    return NULL;
}

/* Values one JSON body may hold (counted by its commas and openings): the
 * largest a route takes is a job's env and args, a few thousand. */
#define API_JSON_VALUES_MAX 20000

cJSON *api_parse_object(const api_req *rq, api_resp *rs)
{
    if (rq->body_len == 0) {
        api_error(rs, 400, "invalid_json", NULL, "a JSON object body is required");
        return NULL;
    }
    if (has_escaped_nul(rq->body, rq->body_len)) {
        api_error(rs, 400, "invalid_json", NULL, "strings may not contain NUL (\\u0000)");
        return NULL;
    }
    /* A raw NUL is no JSON anywhere (inside a string a control byte must
     * be escaped), and it would cut a C string short: "ab\0cd" named "ab". */
    if (memchr(rq->body, '\0', rq->body_len)) {
        api_error(rs, 400, "invalid_json", NULL, "the body holds a NUL byte");
        return NULL;
    }
    /* A parse costs memory per value, not per byte (1 MiB of "0," is half a
     * million values): bodies of more values than any route takes are
     * refused before they are parsed. */
    size_t values = 0;
    for (size_t i = 0; i < rq->body_len; i++)
        values += rq->body[i] == ',' || rq->body[i] == '[' || rq->body[i] == '{';
    if (values > API_JSON_VALUES_MAX) {
        api_error(rs, 413, "too_large", NULL, "the body holds more than %d JSON values",
                  API_JSON_VALUES_MAX);
        return NULL;
    }
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(rq->body, rq->body_len, &end, 0);
    if (!o) {
        size_t at = end && end >= rq->body ? (size_t)(end - rq->body) : 0;
        api_error(rs, 400, "invalid_json", NULL,
                  "malformed JSON near byte %zu (or nested deeper than %d)", at,
                  CJSON_NESTING_LIMIT);
        return NULL;
    }
    for (; end && end < rq->body + rq->body_len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\r' && *end != '\n') {
            cJSON_Delete(o);
            api_error(rs, 400, "invalid_json", NULL, "unexpected data after the JSON value");
            return NULL;
        }
    }
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        api_error(rs, 400, "invalid_json", NULL, "the body must be a JSON object");
        return NULL;
    }
    /* Every string must be UTF-8: what is stored is echoed in JSON and CSV. */
    char path[200] = "";
    if (first_bad_utf8(o, path, sizeof path)) {
        char field[80];
        fmt_cut(field, sizeof field, "%.*s", (int)strcspn(path, ".["), path);
        cJSON_Delete(o);
        api_error(rs, 400, "invalid_utf8", field[0] && field[0] != '(' ? field : NULL,
                  "'%s' is not valid UTF-8 (overlong, surrogate, truncated or stray bytes)",
                  path);
        return NULL;
    }
    return o;
}

int api_fields_known(const cJSON *obj, const char *const *allowed, api_resp *rs)
{
    for (const cJSON *m = obj->child; m; m = m->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, m->string))
                ok = 1;
        if (!ok) {
            api_error(rs, 400, "unknown_field", m->string, "unknown field '%.64s'", m->string);
            return -1;
        }
        for (const cJSON *p = obj->child; p != m; p = p->next) {
            if (!strcmp(p->string, m->string)) {
                api_error(rs, 400, "duplicate_field", m->string, "field '%.64s' appears twice",
                          m->string);
                return -1;
            }
        }
    }
    return 0;
}

/* The member, or NULL; an explicit null counts as absent. */
static const cJSON *member(const cJSON *obj, const char *key, int required, api_resp *rs,
                           int *rc)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && cJSON_IsNull(v))
        v = NULL;
    *rc = 0;
    if (!v && required) {
        api_error(rs, 400, "missing_field", key, "'%s' is required", key);
        *rc = -1;
    }
    return v;
}

int api_str(const cJSON *obj, const char *key, int required, size_t maxlen, const char **out,
            api_resp *rs)
{
    int rc;
    const cJSON *v = member(obj, key, required, rs, &rc);
    if (!v)
        return rc;
    if (!cJSON_IsString(v)) {
        api_error(rs, 400, "invalid_type", key, "'%s' must be a string", key);
        return -1;
    }
    if (strlen(v->valuestring) > maxlen) {
        api_error(rs, 422, "invalid_value", key, "'%s' is longer than %zu bytes", key, maxlen);
        return -1;
    }
    *out = v->valuestring;
    return 1;
}

int api_name(const cJSON *obj, const char *key, int required, const char **out, api_resp *rs)
{
    int rc = api_str(obj, key, required, UTIL_NAME_MAX, out, rs);
    if (rc == 1 && !util_name_valid(*out)) {
        api_error(rs, 422, "invalid_value", key,
                  "'%s' must match [a-z0-9][a-z0-9._-]{0,62}", key);
        return -1;
    }
    return rc;
}

int api_num(const cJSON *obj, const char *key, int required, double min, double max,
            double *out, api_resp *rs)
{
    int rc;
    const cJSON *v = member(obj, key, required, rs, &rc);
    if (!v)
        return rc;
    if (!cJSON_IsNumber(v)) {
        api_error(rs, 400, "invalid_type", key, "'%s' must be a number", key);
        return -1;
    }
    if (!isfinite(v->valuedouble) || v->valuedouble < min || v->valuedouble > max) {
        api_error(rs, 422, "invalid_value", key, "'%s' must be between %g and %g", key, min,
                  max);
        return -1;
    }
    *out = v->valuedouble;
    return 1;
}

int api_int(const cJSON *obj, const char *key, int required, int64_t min, int64_t max,
            int64_t *out, api_resp *rs)
{
    int rc;
    const cJSON *v = member(obj, key, required, rs, &rc);
    if (!v)
        return rc;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble) {
        api_error(rs, 400, "invalid_type", key, "'%s' must be an integer", key);
        return -1;
    }
    double d = v->valuedouble;
    if (d < (double)min || d > (double)max) {
        api_error(rs, 422, "invalid_value", key,
                  "'%s' must be between %lld and %lld", key, (long long)min, (long long)max);
        return -1;
    }
    *out = (int64_t)d;
    return 1;
}

int api_bool(const cJSON *obj, const char *key, int required, int *out, api_resp *rs)
{
    int rc;
    const cJSON *v = member(obj, key, required, rs, &rc);
    if (!v)
        return rc;
    if (!cJSON_IsBool(v)) {
        api_error(rs, 400, "invalid_type", key, "'%s' must be true or false", key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

int64_t api_id(const char *s)
{
    if (!s || !*s || strlen(s) > 18)
        return 0;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        v = v * 10 + (*s - '0');
    }
    return v;
}

int api_page(const api_req *rq, int *limit, int64_t *cursor, api_resp *rs)
{
    const char *l = rq->query(rq->h, "limit");
    const char *c = rq->query(rq->h, "cursor");
    *limit = API_LIST_DEFAULT;
    *cursor = 0;
    if (l) {
        int64_t v = api_id(l);
        if (v < 1 || v > API_LIST_MAX) {
            api_error(rs, 400, "invalid_value", "limit", "limit must be 1..%d", API_LIST_MAX);
            return -1;
        }
        *limit = (int)v;
    }
    if (c && *c) {
        *cursor = api_id(c);
        if (*cursor <= 0) {
            api_error(rs, 400, "invalid_value", "cursor", "cursor is not one this API gave");
            return -1;
        }
    }
    return 0;
}

void api_add_int(cJSON *o, const char *key, int64_t v)
{
    char buf[24], *p = buf + sizeof buf;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    *--p = '\0';
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--p = '-';
    cJSON_AddRawToObject(o, key, p);
}

void api_add_text(cJSON *o, const char *key, const char *s)
{
    if (s && s[0])
        cJSON_AddStringToObject(o, key, s);
    else
        cJSON_AddNullToObject(o, key);
}

void api_add_int_if(cJSON *o, const char *key, int64_t v, int present)
{
    if (present)
        api_add_int(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

cJSON *api_object(int64_t id, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    if (name)
        cJSON_AddStringToObject(o, "name", name);
    return o;
}

void api_add_resources(cJSON *o, int64_t cpus, int64_t memory_mb, int64_t gpus,
                       const char *gpu_type)
{
    cJSON_AddNumberToObject(o, "cpus", (double)cpus);
    cJSON_AddNumberToObject(o, "memory_mb", (double)memory_mb);
    cJSON_AddNumberToObject(o, "gpus", (double)gpus);
    if (gpu_type[0])
        cJSON_AddStringToObject(o, "gpu_type", gpu_type);
    else
        cJSON_AddNullToObject(o, "gpu_type");
}

void api_add_time(cJSON *o, const char *key, int64_t ms)
{
    if (ms <= 0) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    char t[32];
    util_rfc3339(ms, t);
    cJSON_AddStringToObject(o, key, t);
}

void api_defer(api_resp *rs, store_write_fn fn, void *wctx,
               void (*fin)(api_ctx *ctx, api_resp *rs, void *wctx, int rc))
{
    api_defer_many(rs, fn, NULL, wctx, fin);
}

void api_defer_many(api_resp *rs, store_write_fn fn, store_write_many_fn many, void *wctx,
                    void (*fin)(api_ctx *ctx, api_resp *rs, void *wctx, int rc))
{
    rs->write_fn = fn;
    rs->write_many = many;
    rs->write_ctx = wctx;
    rs->finish = fin;
}

int api_store_error(api_resp *rs, int rc, const char *what)
{
    switch (rc) {
    case STORE_NOTFOUND:
        api_error(rs, 404, "not_found", NULL, "%s not found", what);
        break;
    case STORE_CONFLICT:
        api_error(rs, 409, "conflict", NULL, "%s already exists", what);
        break;
    case STORE_INVALID:
        api_error(rs, 422, "invalid_value", NULL, "%s refused by a constraint", what);
        break;
    case STORE_BUSY:
        api_error(rs, 503, "shutting_down", NULL, "the server is shutting down");
        break;
    case STORE_FULL:
        api_error(rs, 507, "no_space", NULL,
                  "the server's disk is full: %s was not stored (nothing changed)", what);
        break;
    case STORE_JOIN_REFUSED:
        api_error(rs, 401, "unauthorized", "join_token", "the join token is not valid");
        break;
    case STORE_DOWN:
        api_error(rs, 503, "database_unavailable", NULL,
                  "the database cannot be reached (while handling %s): try again shortly", what);
        rs->xname = "Retry-After";
        fmt_cut(rs->xvalue, sizeof rs->xvalue, "1");
        break;
    default:
        api_error(rs, 500, "internal", NULL, "storage error while handling %s", what);
        break;
    }
    return -1;
}

int api_write(api_ctx *ctx, api_resp *rs, store_write_fn fn, void *arg, const char *what)
{
    int rc = store_write(ctx->st, fn, arg);
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, what);
}

void api_created(api_resp *rs, cJSON *body, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs->location, sizeof rs->location, fmt, ap);
    va_end(ap);
    api_json(rs, 201, body);
}

void api_list_add(api_list *pg, cJSON *item, int64_t id)
{
    if (!pg->items)
        pg->items = cJSON_CreateArray();
    if (!cJSON_AddItemToArray(pg->items, item)) {
        cJSON_Delete(item); /* out of memory: the page is short, not broken */
        return;
    }
    pg->n++;
    pg->last = id;
}

int api_list_open(const api_req *rq, api_list *pg, api_resp *rs)
{
    memset(pg, 0, sizeof *pg);
    return api_page(rq, &pg->limit, &pg->cursor, rs);
}

void api_list_close(api_resp *rs, api_list *pg, int rc, const char *what)
{
    api_list_done(rs, pg, pg->limit, rc, what);
}

void api_list_next(cJSON *o, const api_list *pg, int limit)
{
    if (limit > 0 && pg->n == limit) {
        char c[24];
        fmt_cut(c, sizeof c, "%lld", (long long)pg->last);
        cJSON_AddStringToObject(o, "next_cursor", c);
    } else {
        cJSON_AddNullToObject(o, "next_cursor");
    }
}

void api_list_send(api_resp *rs, api_list *pg, int limit)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "items", pg->items ? pg->items : cJSON_CreateArray());
    pg->items = NULL;
    api_list_next(o, pg, limit);
    api_json(rs, 200, o);
}

void api_list_done(api_resp *rs, api_list *pg, int limit, int rc, const char *what)
{
    if (rc != STORE_OK) {
        cJSON_Delete(pg->items);
        pg->items = NULL;
        api_store_error(rs, rc, what);
        return;
    }
    api_list_send(rs, pg, limit);
}
