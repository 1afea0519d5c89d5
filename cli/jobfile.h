/*
 * jobfile: a job as a file (YAML or JSON) or as flags, turned into the body
 * of POST /v1/jobs.  Every key is a field of JobCreate (openapi.yaml) plus
 * `code`, the local directory `cohort submit` uploads into the workspace
 * first.  Each field has one type here; a value of another type, an unknown
 * key, a YAML alias, a tag or a document past the bounds below is refused
 * with the key and line that are wrong.
 */
#ifndef COHORT_CLI_JOBFILE_H
#define COHORT_CLI_JOBFILE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define JF_FILE_MAX (1 << 20)  /* bytes of a job file */
#define JF_DEPTH_MAX 4         /* the job, a list or map, its items */
#define JF_NODES_MAX 20000     /* values in one file, as cohortd's JSON bound */

/*
 * Parses text (len bytes; YAML, of which JSON is a part) into a new object
 * *body, the caller's (cJSON_Delete), with each field of its type, and the
 * value of `code` into *code (malloc'd, the caller's; NULL when absent).
 * 0, or -1 with the reason in err (where names the text in messages).
 */
int jf_parse(const char *text, size_t len, const char *where, cJSON **body, char **code,
             char *err, size_t errlen);
/* The same for the file at path (at most JF_FILE_MAX bytes). */
int jf_load(const char *path, cJSON **body, char **code, char *err, size_t errlen);
/*
 * Sets key in body from a flag's text, converted to the key's type; a list
 * key (datasets, args) gets value appended, env gets "NAME=VALUE" added.
 * 0, or -1 with the reason in err.
 */
int jf_set(cJSON *body, const char *key, const char *value, char *err, size_t errlen);

#endif
