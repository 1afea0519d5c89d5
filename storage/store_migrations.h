/* The migrations compiled into the binary (generated from migrations/). */
#ifndef COHORT_STORE_MIGRATIONS_H
#define COHORT_STORE_MIGRATIONS_H

struct store_migration {
    int version;
    const char *name;
    const char *sql;
};

/* SQLite's (migrations/NNN_*.sql) and PostgreSQL's
 * (migrations/postgresql/NNN_*.sql): the same versions in two dialects. */
extern const struct store_migration store_migrations[];
extern const int store_migrations_count;
extern const struct store_migration store_migrations_pg[];
extern const int store_migrations_pg_count;

#endif
