/*
 * agentnote.c - reading DIR/agent-<pid>.json (agentnote.h).  The files are
 * in a run directory, which may be another user's copy or crafted: nothing
 * in them is trusted.  The parser takes a flat JSON object only, bounds
 * every string to its field, and turns control characters into '?' so that
 * a note cannot move the terminal's cursor when the report prints it.
 * tests/fuzz/fuzz_agentnote.c runs it on arbitrary bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentnote.h"
#include "rec.h"
#include "util.h"

struct jp {
    const char *p, *end;
};

static void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jp_hex4(struct jp *j, unsigned *out)
{
    if (j->end - j->p < 4)
        return -EINVAL;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -EINVAL;
    }
    *out = v;
    return 0;
}

/* Appends code point cp to out (cap bytes, *len used, always room for the
 * NUL) as UTF-8, '?' for a control character or a surrogate; what does not
 * fit is dropped whole. */
static void jp_put(char *out, size_t cap, size_t *len, unsigned cp)
{
    char u[4];
    size_t k;
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (cp >= 0xd800 && cp < 0xe000) ||
        cp > 0x10ffff)
        cp = '?';
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    if (!out || *len + k >= cap)
        return;
    memcpy(out + *len, u, k);
    *len += k;
    out[*len] = '\0';
}

/* A string at j->p (the opening quote), decoded into out (cap bytes; NULL:
 * skipped). */
static int jp_str(struct jp *j, char *out, size_t cap)
{
    size_t len = 0;
    if (out && cap)
        out[0] = '\0';
    if (j->p >= j->end || *j->p != '"')
        return -EINVAL;
    j->p++;
    while (j->p < j->end) {
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"')
            return 0;
        if (c < 0x20)
            return -EINVAL;
        if (c != '\\') {
            jp_put(out, cap, &len, c < 0x80 ? c : '?'); /* the writer escapes non-ASCII */
            continue;
        }
        if (j->p >= j->end)
            return -EINVAL;
        char e = *j->p++;
        unsigned cp;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            cp = (unsigned char)e;
            break;
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            cp = '?';
            break;
        case 'u':
            if (jp_hex4(j, &cp) < 0)
                return -EINVAL;
            if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u') {
                struct jp save = *j;
                unsigned lo;
                j->p += 2;
                if (jp_hex4(j, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else
                    *j = save;
            }
            break;
        default:
            return -EINVAL;
        }
        jp_put(out, cap, &len, cp);
    }
    return -EINVAL;
}

/* A number, true, false or null: *num gets a non-negative integer's value
 * (-1 otherwise), *bool 1/0 for true/false (-1 otherwise). */
static int jp_scalar(struct jp *j, int64_t *num, int *b)
{
    *num = -1;
    *b = -1;
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= k && memcmp(j->p, words[i], k) == 0) {
            j->p += k;
            *b = i < 2 ? !i : -1;
            return 0;
        }
    }
    const char *s = j->p;
    int64_t v = 0;
    bool plain = true;
    while (j->p < j->end && strchr("+-.eE0123456789", *j->p) && *j->p) {
        if (*j->p < '0' || *j->p > '9')
            plain = false;
        else if (v < INT32_MAX)
            v = v * 10 + (*j->p - '0');
        j->p++;
    }
    if (j->p == s)
        return -EINVAL;
    if (plain && v <= INT32_MAX)
        *num = v;
    return 0;
}

int tm_agent_note_parse(const char *buf, size_t len, tm_agent_note *n)
{
    memset(n, 0, sizeof *n);
    n->pid = -1;
    n->loaded = -1;
    struct jp j = {buf, buf + len};
    jp_ws(&j);
    if (j.p >= j.end || *j.p++ != '{')
        return -EINVAL;
    jp_ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
        goto tail;
    }
    for (;;) {
        char key[16];
        jp_ws(&j);
        if (jp_str(&j, key, sizeof key) < 0)
            return -EINVAL;
        jp_ws(&j);
        if (j.p >= j.end || *j.p++ != ':')
            return -EINVAL;
        jp_ws(&j);
        if (j.p >= j.end)
            return -EINVAL;
        if (*j.p == '"') {
            char *out = NULL;
            size_t cap = 0;
            if (strcmp(key, "python") == 0)
                out = n->python, cap = sizeof n->python;
            else if (strcmp(key, "version") == 0)
                out = n->version, cap = sizeof n->version;
            else if (strcmp(key, "reason") == 0)
                out = n->reason, cap = sizeof n->reason;
            else if (strcmp(key, "fix") == 0)
                out = n->fix, cap = sizeof n->fix;
            if (jp_str(&j, out, cap) < 0)
                return -EINVAL;
        } else {
            int64_t num;
            int b;
            if (jp_scalar(&j, &num, &b) < 0)
                return -EINVAL;
            if (strcmp(key, "pid") == 0)
                n->pid = num;
            else if (strcmp(key, "loaded") == 0)
                n->loaded = b;
        }
        jp_ws(&j);
        if (j.p >= j.end)
            return -EINVAL;
        char c = *j.p++;
        if (c == '}')
            break;
        if (c != ',')
            return -EINVAL;
    }
tail:
    jp_ws(&j);
    return j.p == j.end ? 0 : -EINVAL;
}

static bool note_name(const char *s)
{
    size_t n = strlen(s);
    return n > 11 && strncmp(s, "agent-", 6) == 0 && strcmp(s + n - 5, ".json") == 0;
}

int tm_agent_notes_scan(const char *dir, tm_agent_notes *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    char *buf = malloc(TM_AGENT_NOTE_MAX + 1);
    tm_agent_note *n = malloc(sizeof *n);
    if (!buf || !n) {
        free(buf);
        free(n);
        closedir(d);
        return -ENOMEM;
    }
    struct dirent *de;
    unsigned seen = 0;
    while ((de = readdir(d)) && seen++ < TM_AGENT_NOTES_MAX) {
        if (!note_name(de->d_name))
            continue;
        char path[4352];
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
            continue;
        int fd = tm_rec_open_read(path);
        ssize_t len = fd < 0 ? fd : tm_read_fd_file(fd, path, buf, TM_AGENT_NOTE_MAX + 1);
        if (len < 0 || tm_agent_note_parse(buf, (size_t)len, n) < 0) {
            out->unreadable++;
            continue;
        }
        if (n->loaded != 0)
            continue;
        if (out->not_loaded++ == 0 ||
            (n->pid >= 0 && (out->first.pid < 0 || n->pid < out->first.pid)))
            out->first = *n;
    }
    free(buf);
    free(n);
    closedir(d);
    return 0;
}
