/*
 * out: how cohort prints what the API answered: aligned tables, "key: value"
 * views, -o FIELD,... for scripts (tab-separated, no header), and a progress
 * bar on stderr when it is a terminal.  --json is the commands' own: they
 * print the API's body as it came.
 */
#ifndef COHORT_CLI_OUT_H
#define COHORT_CLI_OUT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"

/* A column (or a row of a view): its heading and the field it shows, a dot
 * path into each item ("price.cost_so_far"); fmt, when set, writes the cell
 * instead. */
typedef struct out_col {
    const char *head;
    const char *key;
    void (*fmt)(const cJSON *item, char *buf, size_t n);
} out_col;

/* The value at dot path key of o, or NULL. */
const cJSON *out_find(const cJSON *o, const char *key);
/* v as text into buf: strings as they are, whole numbers without a point,
 * lists of text joined by ",", null or absent as "-", the rest as JSON. */
void out_text(const cJSON *v, char *buf, size_t n);
/* Prints items (an array of objects): -o fields when c->fields, else a
 * table of cols.  0, or CLI_USAGE for a -o field no item has. */
int out_table(const cli *c, const cJSON *items, const out_col *cols, size_t ncol);
/* A list as the commands print it: {"items": [...]} with --json, else as
 * out_table. */
int out_items(const cli *c, const cJSON *items, const out_col *cols, size_t ncol);
/* GETs every page of the list at path and prints it as out_items. */
int out_list_get(cli *c, const char *path, const out_col *cols, size_t ncol);
/* Prints one object: -o fields when c->fields, else "head: value" lines. */
int out_view(const cli *c, const cJSON *o, const out_col *rows, size_t nrow);
/* Prints v as JSON (pretty on a terminal), with a newline. */
void out_json(const cli *c, const cJSON *v);
/* Money in minor units as "12.34 USD" (zero-decimal currencies without a point). */
void out_money(double minor, const char *currency, char *buf, size_t n);
/* "1.5 MB" style sizes. */
void out_bytes(double n, char *buf, size_t len);

/* A progress bar over total bytes, drawn on stderr when c->progress. */
typedef struct out_bar {
    int on;
    const char *what;
    int64_t total, base, now;  /* base: bytes of files already done */
    int64_t t0_ms, drawn_ms;
} out_bar;

void out_bar_start(out_bar *b, const cli *c, const char *what, int64_t total);
/* The current file has moved done bytes (a libcurl progress callback's shape). */
void out_bar_file(void *bar, int64_t done);
/* A file is done: its size joins the base. */
void out_bar_next(out_bar *b, int64_t size);
void out_bar_end(out_bar *b);

#endif
