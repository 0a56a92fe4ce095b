/*
 * prom.h - appending to a tm_text, for the library's other exporters of
 * text (health.c).  Each call is a no-op once the text holds an error
 * (tm_text_error), so that writers check once at the end.
 */
#ifndef TM_PROM_H
#define TM_PROM_H

#include <stddef.h>

#include "trainmon.h"

void tm_text_add(tm_text *t, const char *s, size_t len);
void tm_text_puts(tm_text *t, const char *s);
void tm_text_printf(tm_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string (UTF-8 passes through, ill-formed bytes
 * become U+FFFD). */
void tm_text_json_str(tm_text *t, const char *s);
/* s[0..len) escaped for how (tm_escape). */
void tm_text_esc(tm_text *t, tm_esc how, const char *s, size_t len);
/* Drops what follows the first len bytes (len <= the text's length). */
void tm_text_truncate(tm_text *t, size_t len);

#endif
