/*
 * fuzz_evidence.c - libFuzzer target for the evidence reader of units.c:
 * a finding's evidence (a JSON object) as the text line and as HTML, one
 * number looked up by key, and tm_fmt_fixed on the input's first 8 bytes
 * as a double.  The rules write the evidence, but the reader must hold on
 * any text: a cut object, unbalanced brackets, stray commas, NUL.  The
 * input is copied and NUL-terminated (the reader takes C strings).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"
#include "trainmon.h"
#include "units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names every pid, with a name that needs escaping in HTML. */
static bool any_pid(void *ctx, long pid, char *buf, size_t cap)
{
    (void)ctx;
    snprintf(buf, cap, "rank <%ld>", pid % 8);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    tm_text *t = tm_text_new(1 << 20);
    if (t) {
        tm_unit_evidence_line(t, TM_ESC_TEXT, s, any_pid, NULL);
        size_t len;
        const char *out = tm_text_data(t, &len);
        /* one line for a terminal: no control characters */
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
                __builtin_trap();
        tm_text_reset(t);
        tm_unit_evidence_line(t, TM_ESC_HTML, s, any_pid, NULL);
        out = tm_text_data(t, &len);
        if (memchr(out, '<', len))
            __builtin_trap(); /* escaped: no markup from the input */
        tm_text_free(&t);
    }
    (void)tm_unit_evidence_num(s, "speedup");
    (void)tm_unit_evidence_num(s, "");
    (void)tm_json_value_end(s);
    if (size >= sizeof(double)) {
        double v;
        memcpy(&v, data, sizeof v);
        char buf[400];
        int prec = size > 8 ? data[8] % 12 : 2;
        size_t n = tm_fmt_fixed(buf, sizeof buf, v, prec);
        if (n >= sizeof buf || strlen(buf) != n)
            __builtin_trap();
        char u[64];
        tm_unit_fmt(u, sizeof u, (tm_unit)(size % 10), v);
        if (strnlen(u, sizeof u) >= sizeof u)
            __builtin_trap();
    }
    free(s);
    return 0;
}
