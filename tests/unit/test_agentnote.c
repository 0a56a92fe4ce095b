/*
 * test_agentnote.c - DIR/agent-<pid>.json, the note a Python process of a
 * `trainmon run` job leaves when trainmon's recorder did not load in it
 * (src/lib/agentnote.c): the note as the sitecustomize writes it, what a
 * crafted one cannot do (move the terminal's cursor, overflow a field,
 * nest), and the directory scan (no symlink followed, no FIFO opened, the
 * lowest pid kept, loaded notes not counted), and the finding the report
 * makes of them: run.agent_not_loaded, high when the run has no steps.
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
#include "trainmon.h"

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

/* A record file of role with n steps of 10 ms (n 0: only its header). */
static void write_rank(const char *dir, const char *name, const char *role, int rank, int n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tm_rec_opts o = {.role = role, .rank = rank};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    int64_t t0 = tm_now_mono_ns();
    for (int i = 0; i < n; i++) {
        tm_inproc_step s = {.step = (uint64_t)i,
                            .start_ns = t0 + i * 10000000LL,
                            .end_ns = t0 + (i + 1) * 10000000LL,
                            .data_wait_ns = 1000000};
        uint8_t buf[128];
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&w);
}

/* The finding run.agent_not_loaded of the run in dir, or NULL; *sev its
 * severity. */
static bool agent_finding(const char *dir, enum tm_severity *sev, char *advice, size_t cap)
{
    tm_run *r = NULL;
    const char *dirs[] = {dir};
    assert_int_equal(tm_run_load(&r, dirs, 1), 0);
    tm_analysis *a = NULL;
    assert_int_equal(tm_analyze(r, &a), 0);
    const tm_finding *f = tm_analysis_find(a, "run.agent_not_loaded");
    if (f) {
        *sev = f->severity;
        snprintf(advice, cap, "%s", f->advice);
    }
    tm_analysis_free(&a);
    tm_run_free(&r);
    return f != NULL;
}

static void test_report_says_the_recorder_did_not_load_high_without_steps(void **st)
{
    (void)st;
    char dir[] = "/tmp/tm-agentnote-run-XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_rank(dir, "system.tmr", "system", -1, 0);
    enum tm_severity sev = TM_SEV_INFO;
    char advice[2048] = "";
    assert_false(agent_finding(dir, &sev, advice, sizeof advice));
    put(dir, "agent-7798.json", written);
    assert_true(agent_finding(dir, &sev, advice, sizeof advice));
    assert_int_equal(sev, TM_SEV_HIGH);
    assert_non_null(strstr(advice, "has no extension built for it"));
    assert_non_null(strstr(advice, "-m pip install /src"));
    /* another process recorded steps: that one's are missing, not all */
    write_rank(dir, "rank0.tmr", "rank0", 0, 20);
    assert_true(agent_finding(dir, &sev, advice, sizeof advice));
    assert_int_equal(sev, TM_SEV_MEDIUM);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
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
        cmocka_unit_test(test_report_says_the_recorder_did_not_load_high_without_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
