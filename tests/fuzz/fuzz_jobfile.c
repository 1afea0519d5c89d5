/*
 * fuzz_jobfile: the job files of `cohort submit` (cli/jobfile.c).  The input
 * is a job file's text, YAML or JSON, given to jf_parse.  When it is refused
 * there must be a reason and nothing left over; when it is taken, the body
 * must be what POST /v1/jobs expects: an object of known fields, each once
 * and of its own type (whole numbers within 2^53, finite numbers, lists of
 * text, a map of text), without `code`, which comes back on its own.  The
 * body printed as JSON must also read back as the same job.
 */
#include <math.h>
#include <string.h>

#include "cli/jobfile.h"
#include "tests/fuzz/fuzz.h"

enum kind { K_STR, K_INT, K_NUM, K_STRS, K_MAP };

static const struct known {
    const char *key;
    enum kind kind;
} known[] = {
    {"name", K_STR},           {"image", K_STR},          {"datasets", K_STRS},
    {"workspace", K_STR},      {"code_path", K_STR},      {"args", K_STRS},
    {"epochs", K_INT},         {"lr", K_NUM},             {"batch_size", K_INT},
    {"worker_spec", K_STR},    {"worker_count", K_INT},   {"workers_per_node", K_INT},
    {"priority", K_INT},       {"max_runtime_seconds", K_INT},
    {"max_retries", K_INT},    {"env", K_MAP},
};

static const struct known *known_of(const char *key)
{
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(known[i].key, key))
            return &known[i];
    return NULL;
}

/* Every item of v (an array or object) is text; an object's names are
 * there and each is given once. */
static void check_texts(const cJSON *v, int named)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        fuzz_check(cJSON_IsString(it) && it->valuestring, "an item that is not text");
        if (!named)
            continue;
        fuzz_check(it->string != NULL, "a map's item without a name");
        for (const cJSON *o = v->child; o != it; o = o->next)
            fuzz_check(strcmp(o->string, it->string) != 0, "a name given twice in a map");
    }
}

static void check_body(const cJSON *body)
{
    const cJSON *it;
    fuzz_check(cJSON_IsObject(body), "the body is not an object");
    cJSON_ArrayForEach(it, body) {
        fuzz_check(it->string != NULL, "a field without a name");
        const struct known *k = known_of(it->string);
        fuzz_check(k != NULL, "a field that JobCreate does not have (or code)");
        for (const cJSON *o = body->child; o != it; o = o->next)
            fuzz_check(strcmp(o->string, it->string) != 0, "a field given twice");
        switch (k->kind) {
        case K_STR:
            fuzz_check(cJSON_IsString(it) && it->valuestring, "a text field is not text");
            break;
        case K_INT:
            fuzz_check(cJSON_IsNumber(it), "a whole-number field is not a number");
            fuzz_check(isfinite(it->valuedouble) && it->valuedouble == floor(it->valuedouble) &&
                           fabs(it->valuedouble) <= 9007199254740992.0,
                       "a whole-number field is not a whole number within 2^53");
            break;
        case K_NUM:
            fuzz_check(cJSON_IsNumber(it), "a number field is not a number");
            fuzz_check(isfinite(it->valuedouble), "a number field is not finite");
            break;
        case K_STRS:
            fuzz_check(cJSON_IsArray(it), "a list field is not a list");
            check_texts(it, 0);
            break;
        case K_MAP:
            fuzz_check(cJSON_IsObject(it), "env is not a map");
            check_texts(it, 1);
            break;
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *body = (cJSON *)1;
    char *code = (char *)1, err[512];
    memset(err, 0, sizeof err);
    int rc = jf_parse((const char *)data, size, "fuzz", &body, &code, err, sizeof err);
    if (rc != 0) {
        fuzz_check(rc == -1, "jf_parse returned other than 0 or -1");
        fuzz_check(body == NULL && code == NULL, "a refused file left a body or code");
        fuzz_check(err[0] != '\0', "a refused file without a reason");
        fuzz_check(memchr(err, '\0', sizeof err) != NULL, "the reason overran err");
        return 0;
    }
    fuzz_check(body != (cJSON *)1 && code != (char *)1, "jf_parse left body or code unset");
    check_body(body);

    /* The body as JSON is itself a job file, read back as the same job. */
    char *json = cJSON_PrintUnformatted(body);
    fuzz_check(json != NULL, "the body does not print");
    cJSON *again = NULL;
    char *code2 = NULL;
    rc = jf_parse(json, strlen(json), "fuzz (printed)", &again, &code2, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "printed: %.300s\nrefused: %s\n", json, err);
    fuzz_check(rc == 0, "the printed body is refused");
    fuzz_check(code2 == NULL, "the printed body has code");
    fuzz_check(cJSON_Compare(body, again, 1), "the printed body reads back otherwise");
    cJSON_Delete(again);
    free(json);

    cJSON_Delete(body);
    free(code);
    return 0;
}
