/*
 * jget: typed reads of cJSON members, shared by the agent and the shim (the
 * two read the same desired-state and launch documents).  Header-only: the
 * shim links as little as it can.
 */
#ifndef COHORT_JGET_H
#define COHORT_JGET_H

#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The string member k of o, or NULL when it is missing or not a string.
 * The pointer lives as long as o. */
static inline const char *jget_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The number member k of o as an integer, or dflt when it is missing, not a
 * number, or outside what a double holds exactly (no cast of inf, NaN or
 * 1e300); a fraction is cut toward zero. */
static inline int64_t jget_int(const cJSON *o, const char *k, int64_t dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) ||
        !(v->valuedouble >= -9007199254740992.0 && v->valuedouble <= 9007199254740992.0))
        return dflt;
    return (int64_t)v->valuedouble;
}

/* 1 when the array a holds the string v (a NULL or non-array a holds nothing). */
static inline int jget_has_string(const cJSON *a, const char *v)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (cJSON_IsString(e) && !strcmp(e->valuestring, v))
            return 1;
    }
    return 0;
}

#endif
