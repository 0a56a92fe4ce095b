/*
 * inproc_writer - writes a rank file holding records of every in-process
 * type the schema knows (tm_inproc_fields), for tests/e2e/schema_keys.sh:
 * `dump --json` and `export --format jsonl` must print the same keys for
 * each of them.
 *
 *   inproc_writer PATH
 *
 * The records are made from the schema itself, not by hand, so a type or a
 * field added to the schema is written here without an edit.  Each type
 * gets three variants: every value present (enums at a known value, every
 * flag bit set, strings with a quote, a backslash and a control byte),
 * every f64 unavailable with empty strings and negative signed fields, and
 * all zero.  Prints the number of records written.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainmon.h"

#define NVARIANTS 3

static void set_field(const tm_inproc_field *f, tm_inproc_any *a, int variant, size_t idx,
                      int64_t base_ns)
{
    char *p = (char *)a;
    switch (f->type) {
    case TM_INPROC_U32: {
        /* an enum at its first named value; other u32s (flags) all ones */
        uint32_t v = variant == 2 ? 0 : f->names ? 1u : variant == 0 ? 0xffffffffu : 2u;
        memcpy(p + f->member, &v, 4);
        break;
    }
    case TM_INPROC_I32: {
        int32_t v = variant == 0 ? 3 : variant == 1 ? -1 : 0;
        memcpy(p + f->member, &v, 4);
        break;
    }
    case TM_INPROC_U64: {
        uint64_t v = variant == 2 ? 0 : 40 + (uint64_t)idx;
        memcpy(p + f->member, &v, 8);
        break;
    }
    case TM_INPROC_I64: {
        /* clocks in field order, 10 ms apart: end after start */
        int64_t v = variant == 2 ? 0 : base_ns + (int64_t)idx * 10000000;
        memcpy(p + f->member, &v, 8);
        break;
    }
    case TM_INPROC_F64: {
        double v = variant == 0 ? 1.5e9 + (double)idx : variant == 1 ? NAN : 0.0;
        memcpy(p + f->member, &v, 8);
        break;
    }
    case TM_INPROC_STR: {
        static const char s[] = "a\"b\\c\x01 d";
        const char *v = variant == 0 ? s : "";
        uint16_t n = variant == 0 ? (uint16_t)(sizeof s - 1) : 0;
        memcpy(p + f->member, &v, sizeof v);
        memcpy(p + f->len_member, &n, 2);
        break;
    }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: inproc_writer PATH\n");
        return 2;
    }
    tm_rec_opts o = {.role = "rank0", .rank = 0};
    tm_rec *w = NULL;
    if (tm_rec_open(&w, argv[1], &o) < 0) {
        fprintf(stderr, "inproc_writer: %s\n", tm_last_error());
        return 1;
    }
    int n = 0, rc = 0;
    static uint8_t buf[4 * TM_INPROC_NAME_MAX];
    for (unsigned type = 0; type < 64 && rc == 0; type++) {
        const tm_inproc_field *fields;
        size_t nf = tm_inproc_fields((uint16_t)type, &fields);
        for (int v = 0; v < NVARIANTS && nf && rc == 0; v++) {
            tm_inproc_any a;
            memset(&a, 0, sizeof a);
            int64_t now = tm_now_mono_ns();
            for (size_t i = 0; i < nf; i++)
                set_field(&fields[i], &a, v, i, now);
            int len = tm_inproc_encode((uint16_t)type, &a, buf, sizeof buf);
            rc = len < 0 ? len : tm_rec_append(w, (uint16_t)type, now, buf, (uint32_t)len);
            n++;
        }
    }
    tm_rec_close(&w);
    if (rc < 0) {
        fprintf(stderr, "inproc_writer: %d\n", rc);
        return 1;
    }
    printf("%d\n", n);
    return 0;
}
