/*
 * fuzz_alert_rule.c - libFuzzer target: the --alert rule parser
 * (tm_alert_rule_parse) on arbitrary text, and the label helper
 * (tm_labels_get) on the same bytes.  A rule that parses must name a known
 * metric and round-trip through the engine without error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    tm_alert_rule rule;
    if (tm_alert_rule_parse(text, &rule) == 0) {
        if (!tm_alert_metric_help(rule.metric))
            abort();
        tm_alert_engine *e = NULL;
        if (tm_alert_new(&e) == 0) {
            if (tm_alert_add_rule(e, text) < 0)
                abort();
            tm_alert_feed(e, rule.metric, "device=sda,gpu=0", rule.threshold + 1, 1);
            tm_alert_feed(e, rule.metric, "device=sda,gpu=0", rule.threshold - 1, rule.for_ns + 2);
            tm_alert x;
            while (tm_alert_next(e, &x) == 1)
                ;
            tm_alert_free(&e);
        }
    }
    char val[64];
    tm_labels_get(text, "device", val, sizeof val);
    tm_labels_get(text, "", val, 1);
    free(text);
    return 0;
}
