/*
 * test_agentnote.c - DIR/agent-<pid>.json, the note a Python process of a
 * `trainmon run` job leaves when trainmon's recorder did not load in it
 * (src/lib/agentnote.c): the note as the sitecustomize writes it, what a
 * crafted one cannot do (move the terminal's cursor, overflow a field,
 * nest), and the directory scan (no symlink followed, no FIFO opened, the
 * lowest pid kept, loaded notes not counted).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agentnote.h"

static const char written[] =
    "{\"pid\": 7798, \"python\": \"/root/.pyenv/versions/3.12.1/bin/python3.12\", "
    "\"version\": \"3.12.1\", \"loaded\": false, \"reason\": \"no trainmon installed for it; "
    "/src/python/trainmon has no extension built for it (_trainmon.cpython-312-x86_64-linux-gnu.so)"
    "\", \"fix\": \"/root/.pyenv/versions/3.12.1/bin/python3.12 -m pip install /src\"}\n";

static int parse(const char *s, tm_agent_note *n)
{
    return tm_agent_note_parse(s, strlen(s), n);
}

static void test_note_as_the_sitecustomize_writes_it_is_read_whole(void **st)
{
    (void)st;
    tm_agent_note n;
    assert_int_equal(parse(written, &n), 0);
    assert_int_equal(n.pid, 7798);
    assert_int_equal(n.loaded, 0);
    assert_string_equal(n.python, "/root/.pyenv/versions/3.12.1/bin/python3.12");
    assert_string_equal(n.version, "3.12.1");
    assert_non_null(strstr(n.reason, "has no extension built for it"));
    assert_string_equal(n.fix, "/root/.pyenv/versions/3.12.1/bin/python3.12 -m pip install /src");
}

static void test_escapes_decode_and_control_characters_become_question_marks(void **st)
{
    (void)st;
    tm_agent_note n;
    assert_int_equal(parse("{\"reason\": \"a\\u001b[2Jb\\nc\\\"d\\u00e9\\ud83d\\ude00\"}", &n), 0);
    assert_string_equal(n.reason, "a?[2Jb?c\"d\xc3\xa9\xf0\x9f\x98\x80");
    /* a lone surrogate, and a raw ESC byte (the writer escapes everything) */
    assert_int_equal(parse("{\"fix\": \"x\\ud800y\"}", &n), 0);
    assert_string_equal(n.fix, "x?y");
    assert_int_equal(parse("{\"fix\": \"x\x1b\"}", &n), -EINVAL);
    assert_int_equal(parse("{\"fix\": \"x\xc3\xa9\"}", &n), 0);
    assert_string_equal(n.fix, "x??");
}

static void test_a_long_string_is_cut_to_its_field(void **st)
{
    (void)st;
    size_t len = 5000;
    char *s = malloc(len + 32);
    assert_non_null(s);
    strcpy(s, "{\"version\": \"");
    memset(s + strlen(s), '9', len);
    strcpy(s + 13 + len, "\"}");
    tm_agent_note n;
    assert_int_equal(parse(s, &n), 0);
    assert_int_equal(strlen(n.version), sizeof n.version - 1);
    free(s);
}

static void test_not_a_flat_object_is_refused(void **st)
{
    (void)st;
    tm_agent_note n;
    const char *bad[] = {"",
                         "[]",
                         "{\"pid\": {\"x\": 1}}",
                         "{\"pid\": [1]}",
                         "{\"pid\": 1,}",
                         "{\"pid\" 1}",
                         "{\"reason\": \"open",
                         "{\"pid\": 1} trailing",
                         "{\"loaded\": maybe}",
                         "{\"reason\": \"\\x\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse(bad[i], &n), -EINVAL);
    assert_int_equal(parse(" {} ", &n), 0);
    assert_int_equal(n.pid, -1);
    assert_int_equal(n.loaded, -1);
    /* a pid that is no pid is unknown, not wrapped */
    assert_int_equal(parse("{\"pid\": 99999999999999999999, \"loaded\": true}", &n), 0);
    assert_int_equal(n.pid, -1);
    assert_int_equal(n.loaded, 1);
    assert_int_equal(parse("{\"pid\": -3}", &n), 0);
    assert_int_equal(n.pid, -1);
}

static void put(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_scan_keeps_the_lowest_pid_and_follows_no_symlink_nor_fifo(void **st)
{
    (void)st;
    char dir[] = "/tmp/tm-agentnote-XXXXXX", other[] = "/tmp/tm-agentnote-o-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(other));
    put(dir, "agent-900.json", "{\"pid\": 900, \"loaded\": false, \"reason\": \"later\"}");
    put(dir, "agent-12.json", "{\"pid\": 12, \"loaded\": false, \"reason\": \"first\"}");
    put(dir, "agent-13.json", "{\"pid\": 13, \"loaded\": true}");
    put(dir, "agent-14.json", "not json");
    put(dir, "meta.json", "{\"pid\": 1, \"loaded\": false}");
    put(other, "secret", "{\"pid\": 1, \"loaded\": false, \"reason\": \"via symlink\"}");
    char path[256], target[256];
    snprintf(target, sizeof target, "%s/secret", other);
    snprintf(path, sizeof path, "%s/agent-1.json", dir);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof path, "%s/agent-2.json", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    char big[TM_AGENT_NOTE_MAX + 64];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, "{\"pid\": 3, \"loaded\": false}", 27);
    put(dir, "agent-3.json", big);

    tm_agent_notes g = {0};
    assert_int_equal(tm_agent_notes_scan(dir, &g), 0); /* returns: the FIFO did not block */
    assert_int_equal(g.not_loaded, 2);
    assert_int_equal(g.first.pid, 12);
    assert_string_equal(g.first.reason, "first");
    assert_int_equal(g.unreadable, 4); /* not json, symlink, FIFO, too big */
    assert_int_equal(tm_agent_notes_scan("/nonexistent/tm", &g), -ENOENT);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, other);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_note_as_the_sitecustomize_writes_it_is_read_whole),
        cmocka_unit_test(test_escapes_decode_and_control_characters_become_question_marks),
        cmocka_unit_test(test_a_long_string_is_cut_to_its_field),
        cmocka_unit_test(test_not_a_flat_object_is_refused),
        cmocka_unit_test(test_scan_keeps_the_lowest_pid_and_follows_no_symlink_nor_fifo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
