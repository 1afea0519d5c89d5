/*
 * fuzz_metric: the lines of a worker's output that cohortd stores as
 * metrics ("COHORT_METRIC {json}").  The input is a chunk of output; every
 * line goes through api_metric_json, as api_agent_log does.  Checked: what
 * it keeps is one JSON object that parses back to itself.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "api/api_int.h"
#include "lib/util.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char *json = api_metric_json(p, len);
        if (json) {
            fuzz_check(len > strlen("COHORT_METRIC ") && !memcmp(p, "COHORT_METRIC ", 14),
                       "a metric from a line without the mark");
            fuzz_check(util_utf8_invalid_at(json, strlen(json)) == strlen(json),
                       "a stored metric is not UTF-8");
            cJSON *o = cJSON_Parse(json);
            fuzz_check(cJSON_IsObject(o), "a stored metric is not an object");
            char *again = cJSON_PrintUnformatted(o);
            fuzz_check(again && !strcmp(again, json), "a stored metric does not print back");
            free(again);
            cJSON_Delete(o);
            free(json);
        }
        p += len + 1;
    }
    return 0;
}
