/*
 * fuzz_inproc.c - libFuzzer target: the in-process record decoders, the
 * dump formatter and the schema's generic path (tm_inproc_decode_*,
 * tm_inproc_format, tm_inproc_decode/get/json/encode) on arbitrary
 * payloads of every in-process type, as a damaged or hostile rank file
 * would hand them over.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* An exact-size copy, so that a read past the payload hits the redzone. */
    uint8_t *payload = malloc(size - 1 ? size - 1 : 1);
    if (!payload)
        return 0;
    memcpy(payload, data + 1, size - 1);
    tm_record rec = {.type = (uint16_t)(TM_REC_STEP + data[0] % 10), /* 16..25: two unknown */
                     .t_ns = 12345,
                     .len = (uint32_t)(size - 1),
                     .payload = payload,
                     .offset = 4096};
    tm_inproc_step s;
    tm_inproc_capture c;
    tm_inproc_phase p;
    tm_inproc_oom o;
    tm_inproc_worker w;
    tm_inproc_optstep op;
    tm_inproc_anatomy an;
    tm_inproc_oomsum sm;
    tm_inproc_decode_step(&rec, &s);
    if (tm_inproc_decode_capture(&rec, &c) == 0 && c.tag_len && !c.tag)
        abort();
    if (tm_inproc_decode_phase(&rec, &p) == 0 && p.name_len && !p.name)
        abort();
    tm_inproc_decode_oom(&rec, &o);
    tm_inproc_decode_worker(&rec, &w);
    tm_inproc_decode_optstep(&rec, &op);
    if (tm_inproc_decode_anatomy(&rec, &an) == 0 && an.kind_len && !an.kind)
        abort();
    if (tm_inproc_decode_oomsum(&rec, &sm) == 0 &&
        ((sm.why_len && !sm.why) || (sm.site1_len && !sm.site1) || (sm.site5_len && !sm.site5)))
        abort();
    static char line[TM_INPROC_FORMAT_MAX];
    for (int json = 0; json < 2; json++) {
        int n = tm_inproc_format(&rec, json != 0, line, sizeof line);
        if (n >= 0 && (size_t)n != strlen(line))
            abort();
    }
    /* The generic path export jsonl and Python take: decode, every field's
     * value (strings inside the payload), the JSON members. */
    tm_inproc_any a;
    if (tm_inproc_decode(&rec, &a) == 0) {
        const tm_inproc_field *f;
        size_t nf = tm_inproc_fields(rec.type, &f);
        for (size_t i = 0; i < nf; i++) {
            tm_inproc_value v = tm_inproc_get(&f[i], &a);
            uintptr_t lo = (uintptr_t)payload, s = (uintptr_t)v.s;
            if (v.type == TM_INPROC_STR && v.len && (s < lo || s + v.len > lo + rec.len))
                abort();
        }
        int n = tm_inproc_json(rec.type, &a, line, sizeof line);
        if (n >= 0 && (size_t)n != strlen(line))
            abort();
    }
    /* The encoder takes back what the decoder gave (strings are cut at
     * TM_INPROC_NAME_MAX, so only the length can shrink). */
    static uint8_t enc[256 + 2 * 65536];
    if (tm_inproc_decode(&rec, &a) == 0 && tm_inproc_encode(rec.type, &a, enc, sizeof enc) < 0)
        abort();
    free(payload);
    return 0;
}
