/*
 * out: tables, views, -o fields and the progress bar (out.h).  out_list_get
 * is the one place here that asks the server: a list, every page.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/out.h"
#include "lib/fmt.h"

#define CELL_MAX 512
#define FIELDS_MAX 32

const cJSON *out_find(const cJSON *o, const char *key)
{
    char part[128];
    while (o && *key) {
        size_t n = strcspn(key, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, key, n);
        part[n] = '\0';
        o = cJSON_GetObjectItemCaseSensitive(o, part);
        key += n + (key[n] == '.');
    }
    return o;
}

void out_text(const cJSON *v, char *buf, size_t n)
{
    if (!v || cJSON_IsNull(v)) {
        fmt_cut(buf, n, "-");
    } else if (cJSON_IsString(v)) {
        fmt_cut(buf, n, "%s", v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 1e15)
            fmt_cut(buf, n, "%.0f", d);
        else
            fmt_cut(buf, n, "%g", d);
    } else if (cJSON_IsBool(v)) {
        fmt_cut(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else {
        int all_text = cJSON_IsArray(v);
        const cJSON *it;
        cJSON_ArrayForEach(it, v) all_text &= cJSON_IsString(it);
        if (all_text) {
            size_t off = 0;
            buf[0] = '\0';
            cJSON_ArrayForEach(it, v) {
                if (fmt_whole(buf + off, n - off, "%s%s", off ? "," : "", it->valuestring) != 0)
                    break; /* what fits, whole items only */
                off += strlen(buf + off);
            }
            if (!off)
                fmt_cut(buf, n, "-");
            return;
        }
        char *s = cJSON_PrintUnformatted(v);
        fmt_cut(buf, n, "%s", s ? s : "?");
        free(s);
    }
}

static void cell(const cJSON *item, const out_col *col, char *buf, size_t n)
{
    if (col->fmt)
        col->fmt(item, buf, n);
    else
        out_text(out_find(item, col->key), buf, n);
    for (char *p = buf; *p; p++) /* one line per row */
        if (*p == '\n' || *p == '\t' || *p == '\r')
            *p = ' ';
}

/* -o: the fields named, tab-separated, one line per item. */
static int print_fields(const char *spec, const cJSON *items)
{
    char copy[1024], *names[FIELDS_MAX];
    int nf = 0;
    if (fmt_whole(copy, sizeof copy, "%s", spec) != 0)
        return cli_usage("-o: the field list is too long");
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (nf == FIELDS_MAX)
            return cli_usage("-o: at most %d fields", FIELDS_MAX);
        names[nf++] = t;
    }
    if (!nf)
        return cli_usage("-o takes FIELD[,FIELD...]");
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        for (int i = 0; i < nf; i++) {
            if (!out_find(it, names[i]))
                return cli_usage("-o: no field %s here", names[i]);
        }
    }
    cJSON_ArrayForEach(it, items) {
        for (int i = 0; i < nf; i++) {
            char buf[CELL_MAX * 8];
            const cJSON *v = out_find(it, names[i]);
            if (cJSON_IsNull(v))
                buf[0] = '\0';
            else
                out_text(v, buf, sizeof buf);
            printf("%s%s", i ? "\t" : "", buf);
        }
        putchar('\n');
    }
    return CLI_OK;
}

static void put_cell(const char *s, size_t width, int last)
{
    if (last)
        printf("%s\n", s);
    else
        printf("%-*s  ", (int)width, s);
}

int out_table(const cli *c, const cJSON *items, const out_col *cols, size_t ncol)
{
    if (c->fields)
        return print_fields(c->fields, items);
    size_t w[FIELDS_MAX] = {0};
    char buf[CELL_MAX];
    if (ncol > FIELDS_MAX)
        ncol = FIELDS_MAX;
    for (size_t i = 0; i < ncol; i++)
        w[i] = strlen(cols[i].head);
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        for (size_t i = 0; i < ncol; i++) {
            cell(it, &cols[i], buf, sizeof buf);
            size_t l = strlen(buf);
            w[i] = l > w[i] ? l : w[i];
        }
    }
    for (size_t i = 0; i < ncol; i++)
        put_cell(cols[i].head, w[i], i + 1 == ncol);
    cJSON_ArrayForEach(it, items) {
        for (size_t i = 0; i < ncol; i++) {
            cell(it, &cols[i], buf, sizeof buf);
            put_cell(buf, w[i], i + 1 == ncol);
        }
    }
    return CLI_OK;
}

int out_items(const cli *c, const cJSON *items, const out_col *cols, size_t ncol)
{
    if (!c->json)
        return out_table(c, items, cols, ncol);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(o, "items", (cJSON *)items);
    out_json(c, o);
    cJSON_Delete(o);
    return CLI_OK;
}

int out_list_get(cli *c, const char *path, const out_col *cols, size_t ncol)
{
    cJSON *items = NULL;
    int rc = cli_list(c, path, "items", 1, &items, NULL);
    if (rc == CLI_OK)
        rc = out_items(c, items, cols, ncol);
    cJSON_Delete(items);
    return rc;
}

int out_view(const cli *c, const cJSON *o, const out_col *rows, size_t nrow)
{
    if (c->fields) {
        cJSON *one = cJSON_CreateArray();
        cJSON_AddItemReferenceToArray(one, (cJSON *)o);
        int rc = print_fields(c->fields, one);
        cJSON_Delete(one);
        return rc;
    }
    size_t w = 0;
    for (size_t i = 0; i < nrow; i++)
        w = strlen(rows[i].head) > w ? strlen(rows[i].head) : w;
    char buf[CELL_MAX * 4];
    for (size_t i = 0; i < nrow; i++) {
        cell(o, &rows[i], buf, sizeof buf);
        printf("%-*s  %s\n", (int)w + 1, rows[i].head, buf);
    }
    return CLI_OK;
}

void out_json(const cli *c, const cJSON *v)
{
    char *s = c->tty ? cJSON_Print(v) : cJSON_PrintUnformatted(v);
    if (s)
        puts(s);
    free(s);
}

void out_money(double minor, const char *currency, char *buf, size_t n)
{
    static const char *const whole[] = {"JPY", "KRW", "VND", "CLP", "ISK"};
    int decimals = 2;
    for (size_t i = 0; currency && i < sizeof whole / sizeof *whole; i++)
        if (!strcasecmp(currency, whole[i]))
            decimals = 0;
    if (decimals)
        fmt_cut(buf, n, "%.2f %s", minor / 100.0, currency ? currency : "");
    else
        fmt_cut(buf, n, "%.0f %s", minor, currency);
}

void out_bytes(double v, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1000.0 && u < 4)
        v /= 1000.0, u++;
    fmt_cut(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

/* ---- progress ---- */

static void draw(out_bar *b, int last)
{
    int64_t now = util_now_ms();
    if (!last && now - b->drawn_ms < 100)
        return;
    b->drawn_ms = now;
    double secs = (double)(now - b->t0_ms) / 1000.0;
    double rate = secs > 0.2 ? (double)b->now / secs : 0.0;
    char done[32], total[32], r[32], left[32] = "";
    out_bytes((double)b->now, done, sizeof done);
    out_bytes((double)b->total, total, sizeof total);
    out_bytes(rate, r, sizeof r);
    if (rate > 0 && b->total > b->now) {
        long s = (long)((double)(b->total - b->now) / rate);
        fmt_cut(left, sizeof left, "  %ld:%02ld left", s / 60, s % 60);
    }
    int pct = b->total > 0 ? (int)(100.0 * (double)b->now / (double)b->total) : 100;
    fprintf(stderr, "\r%s %3d%%  %s of %s  %s/s%s\033[K", b->what, pct, done, total, r, left);
    if (last)
        fputc('\n', stderr);
}

void out_bar_start(out_bar *b, const cli *c, const char *what, int64_t total)
{
    *b = (out_bar){.on = c->progress && total > 0, .what = what, .total = total};
    b->t0_ms = util_now_ms();
}

void out_bar_file(void *bar, int64_t done)
{
    out_bar *b = bar;
    b->now = b->base + done;
    if (b->on)
        draw(b, 0);
}

void out_bar_next(out_bar *b, int64_t size)
{
    b->base += size;
    b->now = b->base;
    if (b->on)
        draw(b, 0);
}

void out_bar_end(out_bar *b)
{
    if (b->on)
        draw(b, 1);
    b->on = 0;
}
