/*
 * agentnote.h - DIR/agent-<pid>.json: a Python process of a `trainmon run`
 * job saying that trainmon's in-process recorder did not load in it, and
 * why (written by src/cli/sitecustomize.py).  The report's
 * run.agent_not_loaded finding reads them through here.  Internal.
 */
#ifndef TM_AGENTNOTE_H
#define TM_AGENTNOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TM_AGENT_NOTE_MAX 4096   /* bytes read of one note; a larger one is refused */
#define TM_AGENT_NOTES_MAX 4096u /* directory entries looked at per run directory */

/* One note.  The strings are what the file says, NUL-terminated, cut to
 * their size, with control characters (and raw non-ASCII bytes: the
 * writer escapes them) replaced by '?'; "" when absent. */
typedef struct tm_agent_note {
    int64_t pid; /* -1 when absent */
    int loaded;  /* 1 true, 0 false, -1 absent */
    char python[256], version[32], reason[768], fix[512];
} tm_agent_note;

/* Parses buf (len bytes, not NUL-terminated) as a flat JSON object; keys
 * other than pid, loaded, python, version, reason and fix are skipped, a
 * nested object or array is refused.  0, or -EINVAL (n is then as far as
 * it got; never read past len). */
int tm_agent_note_parse(const char *buf, size_t len, tm_agent_note *n);

/* What the notes of some run directories say, summed. */
typedef struct tm_agent_notes {
    size_t not_loaded;   /* processes whose recorder did not load */
    tm_agent_note first; /* the one of them with the lowest pid */
    size_t unreadable;   /* agent-*.json files refused (not regular, too big, not a note) */
} tm_agent_notes;

/* Adds the agent-*.json notes of dir to *out (zeroed by the caller).  Each
 * file is opened as record files are (tm_rec_open_read: no symlink
 * followed, regular files only, never blocking).  0, or a negative errno
 * when dir cannot be listed (a missing note is no error). */
int tm_agent_notes_scan(const char *dir, tm_agent_notes *out);

#endif
