/*
 * jobfile: job files and job flags into a JobCreate body (jobfile.h).
 * YAML is read with libyaml's event parser into a tree of strings (every
 * scalar stays text: "name: 007" is the name "007", not 7), and that tree,
 * or the JSON cJSON read, is then typed field by field from one table.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "cli/jobfile.h"

typedef enum { T_STR, T_INT, T_NUM, T_STRS, T_MAP } ftype;

static const struct field {
    const char *key;
    ftype type;
} fields[] = {
    {"name", T_STR},           {"image", T_STR},          {"datasets", T_STRS},
    {"workspace", T_STR},      {"code_path", T_STR},      {"args", T_STRS},
    {"epochs", T_INT},         {"lr", T_NUM},             {"batch_size", T_INT},
    {"worker_spec", T_STR},    {"worker_count", T_INT},   {"workers_per_node", T_INT},
    {"priority", T_INT},       {"max_runtime_seconds", T_INT},
    {"max_retries", T_INT},    {"env", T_MAP},            {"code", T_STR},
};

static const struct field *field_of(const char *key)
{
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!strcmp(fields[i].key, key))
            return &fields[i];
    return NULL;
}

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- YAML into a tree of strings ---- */

struct yp {
    yaml_parser_t p;
    yaml_event_t ev;
    int have;        /* ev holds an event to be deleted */
    int nodes;
    const char *where;
    char *err;
    size_t errlen;
};

static int next(struct yp *y)
{
    if (y->have)
        yaml_event_delete(&y->ev);
    y->have = 0;
    if (!yaml_parser_parse(&y->p, &y->ev))
        return fail(y->err, y->errlen, "%s line %zu: %s", y->where,
                    (size_t)y->p.problem_mark.line + 1,
                    y->p.problem ? y->p.problem : "not YAML");
    y->have = 1;
    return 0;
}

static size_t line_of(const struct yp *y)
{
    return (size_t)y->ev.start_mark.line + 1;
}

static int node(struct yp *y, int depth, cJSON **out);

static int mapping(struct yp *y, int depth, cJSON *o)
{
    for (;;) {
        if (next(y))
            return -1;
        if (y->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (y->ev.type != YAML_SCALAR_EVENT)
            return fail(y->err, y->errlen, "%s line %zu: a key must be plain text", y->where,
                        line_of(y));
        char *key = strdup((const char *)y->ev.data.scalar.value);
        size_t line = line_of(y);
        if (!key)
            return fail(y->err, y->errlen, "out of memory");
        if (cJSON_GetObjectItemCaseSensitive(o, key)) {
            fail(y->err, y->errlen, "%s line %zu: %s is given twice", y->where, line, key);
            free(key);
            return -1;
        }
        cJSON *v = NULL;
        int rc = next(y) ? -1 : node(y, depth + 1, &v);
        if (rc == 0)
            cJSON_AddItemToObject(o, key, v);
        free(key);
        if (rc)
            return -1;
    }
}

static int sequence(struct yp *y, int depth, cJSON *a)
{
    for (;;) {
        if (next(y))
            return -1;
        if (y->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        cJSON *v = NULL;
        if (node(y, depth + 1, &v))
            return -1;
        cJSON_AddItemToArray(a, v);
    }
}

/* The node whose first event is y->ev, into *out (the caller's). */
static int node(struct yp *y, int depth, cJSON **out)
{
    if (++y->nodes > JF_NODES_MAX)
        return fail(y->err, y->errlen, "%s: more than %d values", y->where, JF_NODES_MAX);
    if (depth > JF_DEPTH_MAX)
        return fail(y->err, y->errlen, "%s line %zu: nested too deep", y->where, line_of(y));
    const yaml_char_t *tag = NULL, *anchor = NULL;
    switch (y->ev.type) {
    case YAML_SCALAR_EVENT:
        tag = y->ev.data.scalar.tag, anchor = y->ev.data.scalar.anchor;
        break;
    case YAML_SEQUENCE_START_EVENT:
        tag = y->ev.data.sequence_start.tag, anchor = y->ev.data.sequence_start.anchor;
        break;
    case YAML_MAPPING_START_EVENT:
        tag = y->ev.data.mapping_start.tag, anchor = y->ev.data.mapping_start.anchor;
        break;
    case YAML_ALIAS_EVENT:
        return fail(y->err, y->errlen, "%s line %zu: aliases (*name) are not taken", y->where,
                    line_of(y));
    default:
        return fail(y->err, y->errlen, "%s line %zu: unexpected YAML", y->where, line_of(y));
    }
    if (tag || anchor)
        return fail(y->err, y->errlen, "%s line %zu: tags and anchors are not taken", y->where,
                    line_of(y));
    if (y->ev.type == YAML_SCALAR_EVENT) {
        *out = cJSON_CreateString((const char *)y->ev.data.scalar.value);
        return *out ? 0 : fail(y->err, y->errlen, "out of memory");
    }
    int map = y->ev.type == YAML_MAPPING_START_EVENT;
    *out = map ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!*out)
        return fail(y->err, y->errlen, "out of memory");
    int rc = map ? mapping(y, depth, *out) : sequence(y, depth, *out);
    if (rc) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

static int yaml_tree(const char *text, size_t len, const char *where, cJSON **out, char *err,
                     size_t errlen)
{
    struct yp y = {.where = where, .err = err, .errlen = errlen};
    int rc = -1;
    *out = NULL;
    if (!yaml_parser_initialize(&y.p))
        return fail(err, errlen, "out of memory");
    yaml_parser_set_input_string(&y.p, (const unsigned char *)text, len);
    /* stream start, document start, then the document's one node */
    if (next(&y) || y.ev.type != YAML_STREAM_START_EVENT || next(&y))
        goto out;
    if (y.ev.type != YAML_DOCUMENT_START_EVENT) {
        fail(err, errlen, "%s: empty", where);
        goto out;
    }
    if (next(&y) || node(&y, 0, out))
        goto out;
    if (next(&y) || y.ev.type != YAML_DOCUMENT_END_EVENT || next(&y))
        goto out;
    if (y.ev.type != YAML_STREAM_END_EVENT) {
        fail(err, errlen, "%s line %zu: one document only", where, line_of(&y));
        goto out;
    }
    rc = 0;
out:
    if (y.have)
        yaml_event_delete(&y.ev);
    yaml_parser_delete(&y.p);
    if (rc) {
        if (!err[0])
            fail(err, errlen, "%s: not a job file", where);
        cJSON_Delete(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- typing ---- */

/* v as an integer (a JSON number, or text of one): 0, or -1. */
static int as_int(const cJSON *v, double *out)
{
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return *out == floor(*out) && fabs(*out) < 9007199254740992.0 ? 0 : -1;
    }
    const char *s = cJSON_GetStringValue(v);
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || *end || n > (1LL << 53) || n < -(1LL << 53))
        return -1;
    *out = (double)n;
    return 0;
}

static int as_num(const cJSON *v, double *out)
{
    if (cJSON_IsNumber(v)) { /* 1e999 reads as inf, which cJSON prints as null */
        *out = v->valuedouble;
        return isfinite(*out) ? 0 : -1;
    }
    const char *s = cJSON_GetStringValue(v);
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || *end || !isfinite(*out) ? -1 : 0;
}

/* A string, or (from JSON's numbers) not. */
static cJSON *as_str(const cJSON *v)
{
    return cJSON_IsString(v) ? cJSON_CreateString(v->valuestring) : NULL;
}

static cJSON *typed(const struct field *f, const cJSON *v, const char *where, char *err,
                    size_t errlen)
{
    double d;
    cJSON *out = NULL;
    switch (f->type) {
    case T_STR:
        if (!(out = as_str(v)))
            fail(err, errlen, "%s: %s must be text", where, f->key);
        return out;
    case T_INT:
        if (as_int(v, &d) == 0)
            return cJSON_CreateNumber(d);
        fail(err, errlen, "%s: %s must be a whole number", where, f->key);
        return NULL;
    case T_NUM:
        if (as_num(v, &d) == 0)
            return cJSON_CreateNumber(d);
        fail(err, errlen, "%s: %s must be a number", where, f->key);
        return NULL;
    case T_STRS:
    case T_MAP:
        break;
    }
    int map = f->type == T_MAP;
    if (map ? !cJSON_IsObject(v) : !cJSON_IsArray(v)) {
        fail(err, errlen, "%s: %s must be %s", where, f->key,
             map ? "a map of NAME: text" : "a list of text");
        return NULL;
    }
    out = map ? cJSON_CreateObject() : cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        cJSON *s = as_str(it);
        if (!s) {
            fail(err, errlen, "%s: every item of %s must be text", where, f->key);
            cJSON_Delete(out);
            return NULL;
        }
        if (map && cJSON_GetObjectItemCaseSensitive(out, it->string)) {
            fail(err, errlen, "%s: %s names %s twice", where, f->key, it->string);
            cJSON_Delete(s);
            cJSON_Delete(out);
            return NULL;
        }
        if (map)
            cJSON_AddItemToObject(out, it->string, s);
        else
            cJSON_AddItemToArray(out, s);
    }
    return out;
}

static int type_tree(const cJSON *tree, const char *where, cJSON **body, char **code, char *err,
                     size_t errlen)
{
    if (!cJSON_IsObject(tree))
        return fail(err, errlen, "%s: a job file is a map of fields (name: ..., image: ...)",
                    where);
    *body = cJSON_CreateObject();
    const cJSON *it;
    cJSON_ArrayForEach(it, tree) {
        const struct field *f = field_of(it->string);
        if (!f) {
            fail(err, errlen, "%s: unknown field %s", where, it->string);
            goto bad;
        }
        if (strcmp(f->key, "code") ? cJSON_GetObjectItemCaseSensitive(*body, f->key) != NULL
                                   : *code != NULL) { /* JSON's objects may repeat a key */
            fail(err, errlen, "%s: %s is given twice", where, f->key);
            goto bad;
        }
        cJSON *v = typed(f, it, where, err, errlen);
        if (!v)
            goto bad;
        if (!strcmp(f->key, "code")) {
            free(*code);
            *code = strdup(v->valuestring);
            cJSON_Delete(v);
            if (!*code) {
                fail(err, errlen, "out of memory");
                goto bad;
            }
        } else {
            cJSON_AddItemToObject(*body, f->key, v);
        }
    }
    return 0;
bad:
    cJSON_Delete(*body);
    *body = NULL;
    free(*code);
    *code = NULL;
    return -1;
}

int jf_parse(const char *text, size_t len, const char *where, cJSON **body, char **code,
             char *err, size_t errlen)
{
    cJSON *tree = NULL;
    *body = NULL;
    *code = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (len > JF_FILE_MAX)
        return fail(err, errlen, "%s: larger than %d bytes", where, JF_FILE_MAX);
    if (memchr(text, '\0', len))
        return fail(err, errlen, "%s: holds a NUL byte", where);
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    if (i < len && text[i] == '{') { /* JSON: cJSON keeps its numbers and strings apart */
        const char *end = NULL;
        tree = cJSON_ParseWithLengthOpts(text, len, &end, 0);
        if (!tree)
            return fail(err, errlen, "%s: not JSON near byte %td", where,
                        end ? end - text : (ptrdiff_t)0);
        while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (end < text + len) {
            cJSON_Delete(tree);
            return fail(err, errlen, "%s: text after the JSON object, at byte %td", where,
                        end - text);
        }
        /* bound what cJSON built as libyaml's tree is bounded */
        int n = 0;
        for (cJSON *a = tree->child; a; a = a->next)
            for (cJSON *b = a->child; b; b = b->next)
                if (++n > JF_NODES_MAX || b->child) {
                    cJSON_Delete(tree);
                    return fail(err, errlen, "%s: nested too deep or too many values", where);
                }
    } else if (yaml_tree(text, len, where, &tree, err, errlen) != 0) {
        return -1;
    }
    int rc = type_tree(tree, where, body, code, err, errlen);
    cJSON_Delete(tree);
    return rc;
}

int jf_load(const char *path, cJSON **body, char **code, char *err, size_t errlen)
{
    int rc = -1;
    char *buf = NULL;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *body = NULL;
    *code = NULL;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > JF_FILE_MAX) {
        fail(err, errlen, "%s: not a file of at most %d bytes", path, JF_FILE_MAX);
        goto out;
    }
    buf = malloc((size_t)sb.st_size + 1);
    ssize_t got = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
    if (got != sb.st_size) {
        fail(err, errlen, "%s: cannot read it", path);
        goto out;
    }
    rc = jf_parse(buf, (size_t)got, path, body, code, err, errlen);
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

int jf_set(cJSON *body, const char *key, const char *value, char *err, size_t errlen)
{
    const struct field *f = field_of(key);
    if (!f || !strcmp(key, "code"))
        return fail(err, errlen, "%s is not a job field", key);
    cJSON *s = cJSON_CreateString(value);
    if (!s)
        return fail(err, errlen, "out of memory");
    cJSON *v = NULL;
    if (f->type == T_STRS) {
        v = cJSON_GetObjectItemCaseSensitive(body, key);
        if (!cJSON_IsArray(v)) {
            cJSON_DeleteItemFromObjectCaseSensitive(body, key);
            v = cJSON_AddArrayToObject(body, key);
        }
        cJSON_AddItemToArray(v, s);
        return 0;
    }
    if (f->type == T_MAP) {
        const char *eq = strchr(value, '=');
        if (!eq || eq == value) {
            cJSON_Delete(s);
            return fail(err, errlen, "--env takes NAME=VALUE, not %s", value);
        }
        v = cJSON_GetObjectItemCaseSensitive(body, key);
        if (!cJSON_IsObject(v)) {
            cJSON_DeleteItemFromObjectCaseSensitive(body, key);
            v = cJSON_AddObjectToObject(body, key);
        }
        char name[256];
        size_t n = (size_t)(eq - value);
        if (n >= sizeof name) {
            cJSON_Delete(s);
            return fail(err, errlen, "--env: the name is longer than %zu bytes", sizeof name - 1);
        }
        memcpy(name, value, n);
        name[n] = '\0';
        cJSON_DeleteItemFromObjectCaseSensitive(v, name);
        cJSON_AddStringToObject(v, name, eq + 1);
        cJSON_Delete(s);
        return 0;
    }
    v = typed(f, s, "the command line", err, errlen);
    cJSON_Delete(s);
    if (!v)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(body, key);
    cJSON_AddItemToObject(body, key, v);
    return 0;
}
