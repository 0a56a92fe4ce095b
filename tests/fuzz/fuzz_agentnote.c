/*
 * fuzz_agentnote.c - libFuzzer target for the parser of DIR/agent-<pid>.json
 * (agentnote.c), a file in a run directory that anyone with the directory
 * may have crafted.  The input is not NUL-terminated.  Every string field
 * comes back NUL-terminated inside its array, with no control character.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agentnote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n >= cap)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tm_agent_note n;
    int rc = tm_agent_note_parse((const char *)data, size, &n);
    if (rc != 0 && rc != -22)
        __builtin_trap();
    check(n.python, sizeof n.python);
    check(n.version, sizeof n.version);
    check(n.reason, sizeof n.reason);
    check(n.fix, sizeof n.fix);
    if (n.pid < -1 || n.pid > INT32_MAX || n.loaded < -1 || n.loaded > 1)
        __builtin_trap();
    return 0;
}
