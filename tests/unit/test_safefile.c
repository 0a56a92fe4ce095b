/*
 * test_safefile.c - safe file creation (src/lib/safefile.c) on a temporary
 * directory: what a planted symlink, FIFO, hard link or other user's
 * directory does to each helper, that a replace is atomic, and the
 * redaction of secrets on command lines.  The ownership tests chown a
 * directory to nobody and need root; as another user they are skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainmon.h"

#define NOBODY 65534

static char tmp[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof tmp, "/tmp/tm-safefile-XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmp, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void assert_content(const char *path, const char *want)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static int open_tmp(void)
{
    int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

/* ------------------------------------------------------------- creation */

static void test_create_at_makes_a_new_file_with_exactly_the_mode(void **state)
{
    (void)state;
    int d = open_tmp();
    mode_t old = umask(077);
    int fd = tm_file_create_at(d, "new", 0640);
    umask(old);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0640);
    close(fd);
    close(d);
}

static void test_create_at_refuses_a_planted_symlink_and_leaves_its_target(void **state)
{
    (void)state;
    char target[300], link[300];
    path_of(target, sizeof target, "target");
    path_of(link, sizeof link, "link");
    write_text(target, "precious");
    assert_int_equal(symlink(target, link), 0);
    int d = open_tmp();
    assert_int_equal(tm_file_create_at(d, "link", 0600), -ELOOP);
    assert_non_null(strstr(tm_last_error(), "is a symbolic link"));
    assert_non_null(strstr(tm_last_error(), link)); /* the whole path, for the user */
    close(d);
    assert_content(target, "precious");
}

static void test_create_at_refuses_an_existing_file(void **state)
{
    (void)state;
    char p[300];
    path_of(p, sizeof p, "old");
    write_text(p, "kept");
    int d = open_tmp();
    assert_int_equal(tm_file_create_at(d, "old", 0600), -EEXIST);
    close(d);
    assert_content(p, "kept");
}

static void test_create_refuses_a_symlink_and_reuse_does_not_truncate_through_it(void **state)
{
    (void)state;
    char target[300], link[300];
    path_of(target, sizeof target, "target");
    path_of(link, sizeof link, "rec.tmr");
    write_text(target, "precious");
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(tm_file_create(link, 0, 0), -ELOOP);
    assert_int_equal(tm_file_create(link, 0, TM_SAFE_REUSE), -ELOOP);
    assert_content(target, "precious");
}

static void test_reuse_truncates_a_regular_file_of_ours(void **state)
{
    (void)state;
    char p[300];
    path_of(p, sizeof p, "rec.tmr");
    write_text(p, "old content");
    assert_int_equal(tm_file_create(p, 0, 0), -EEXIST);
    int fd = tm_file_create(p, 0, TM_SAFE_REUSE);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 0);
    close(fd);
}

static void test_fifo_is_refused_without_blocking(void **state)
{
    (void)state;
    char p[300];
    path_of(p, sizeof p, "fifo");
    assert_int_equal(mkfifo(p, 0600), 0);
    /* Each would block forever on a FIFO with no reader if it opened it
     * without O_NONBLOCK: alarm() turns a hang into a failure. */
    alarm(5);
    assert_int_equal(tm_file_open_output(p, 0644), -EINVAL);
    assert_non_null(strstr(tm_last_error(), "not a regular file"));
    assert_int_equal(tm_file_create(p, 0, TM_SAFE_REUSE), -EINVAL);
    alarm(0);
}

static void test_hard_link_is_refused(void **state)
{
    (void)state;
    char p[300], l[300];
    path_of(p, sizeof p, "victim");
    path_of(l, sizeof l, "out.html");
    write_text(p, "precious");
    assert_int_equal(link(p, l), 0);
    assert_int_equal(tm_file_open_output(l, 0644), -EMLINK);
    assert_non_null(strstr(tm_last_error(), "2 hard links"));
    assert_int_equal(tm_file_create(l, 0, TM_SAFE_REUSE), -EMLINK);
    assert_content(p, "precious");
}

static void test_output_is_created_or_truncated_and_may_go_through_a_symlinked_dir(void **state)
{
    (void)state;
    char sub[300], via[300], p[400];
    path_of(sub, sizeof sub, "sub");
    path_of(via, sizeof via, "via");
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(symlink(sub, via), 0);
    snprintf(p, sizeof p, "%s/report.txt", via);
    int fd = tm_file_open_output(p, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "first version", 13), 13);
    close(fd);
    fd = tm_file_open_output(p, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "2nd", 3), 3);
    close(fd);
    snprintf(p, sizeof p, "%s/report.txt", sub);
    assert_content(p, "2nd");
}

static void test_output_refuses_a_symlink_at_the_last_component(void **state)
{
    (void)state;
    char target[300], link[300];
    path_of(target, sizeof target, "target");
    path_of(link, sizeof link, "out.csv");
    write_text(target, "precious");
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(tm_file_open_output(link, 0644), -ELOOP);
    assert_content(target, "precious");
}

static void test_file_mode_follows_the_directory_read_bits(void **state)
{
    (void)state;
    char d[300], p[400];
    path_of(d, sizeof d, "grp");
    assert_int_equal(mkdir(d, 0750), 0);
    assert_int_equal(chmod(d, 0750), 0);
    snprintf(p, sizeof p, "%s/a.tmr", d);
    int fd = tm_file_create(p, 0, 0);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    close(fd);
    assert_int_equal(chmod(d, 0700), 0);
    snprintf(p, sizeof p, "%s/b.tmr", d);
    fd = tm_file_create(p, 0, 0);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    close(fd);
}

/* ------------------------------------------------------------- replace */

static void test_replace_writes_the_content_and_replaces_a_planted_symlink(void **state)
{
    (void)state;
    char target[300], link[300];
    path_of(target, sizeof target, "target");
    path_of(link, sizeof link, "meta.json");
    write_text(target, "precious");
    assert_int_equal(symlink(target, link), 0);
    int d = open_tmp();
    assert_int_equal(tm_file_replace_at(d, "meta.json", "{}\n", 3, 0600), 0);
    close(d);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_content(link, "{}\n");
    assert_content(target, "precious");
}

static void test_replace_ignores_a_planted_temporary_name(void **state)
{
    (void)state;
    /* Whatever temporary name an attacker guesses, the helper makes a new
     * one with O_EXCL: a symlink at the old fixed name is left alone. */
    char target[300], link[300], meta[300];
    path_of(target, sizeof target, "target");
    path_of(link, sizeof link, ".meta.json.tmp");
    path_of(meta, sizeof meta, "meta.json");
    write_text(target, "precious");
    assert_int_equal(symlink(target, link), 0);
    int d = open_tmp();
    assert_int_equal(tm_file_replace_at(d, "meta.json", "new", 3, 0600), 0);
    close(d);
    assert_content(target, "precious");
    assert_content(meta, "new");
}

static void test_replace_is_atomic_a_reader_sees_old_or_new_never_a_mix(void **state)
{
    (void)state;
    enum { LEN = 256 * 1024 };
    char *a = malloc(LEN), *b = malloc(LEN), *got = malloc(LEN + 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(got);
    memset(a, 'a', LEN);
    memset(b, 'b', LEN);
    char p[300];
    path_of(p, sizeof p, "meta.json");
    int d = open_tmp();
    assert_int_equal(tm_file_replace_at(d, "meta.json", a, LEN, 0600), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 200; i++)
            if (tm_file_replace_at(d, "meta.json", i % 2 ? a : b, LEN, 0600) != 0)
                _exit(1);
        _exit(0);
    }
    size_t reads = 0, mixed = 0, short_reads = 0;
    int st = 0;
    for (;;) {
        int fd = open(p, O_RDONLY);
        if (fd >= 0) {
            size_t n = 0;
            ssize_t r;
            while (n < LEN + 1 && (r = read(fd, got + n, LEN + 1 - n)) > 0)
                n += (size_t)r;
            close(fd);
            reads++;
            if (n != LEN)
                short_reads++;
            else if (memcmp(got, a, LEN) != 0 && memcmp(got, b, LEN) != 0)
                mixed++;
        } else {
            short_reads++; /* never missing either: rename replaces in one step */
        }
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
    }
    close(d);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(reads > 0);
    assert_int_equal(mixed, 0);
    assert_int_equal(short_reads, 0);
    free(a);
    free(b);
    free(got);
}

/* --------------------------------------------------------- directories */

static void test_dir_open_checked_refuses_a_symlink_even_with_a_trailing_slash(void **state)
{
    (void)state;
    char sub[300], link[300], slash[310];
    path_of(sub, sizeof sub, "realdir");
    path_of(link, sizeof link, "dirlink");
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(symlink(sub, link), 0);
    snprintf(slash, sizeof slash, "%s/", link);
    assert_int_equal(tm_dir_open_checked(link, 0), -ELOOP);
    assert_int_equal(tm_dir_open_checked(slash, 0), -ELOOP);
    int fd = tm_dir_open_checked(sub, 0);
    assert_true(fd >= 0);
    close(fd);
}

static void test_dir_writable_by_others_is_refused_unless_allowed(void **state)
{
    (void)state;
    char d[300];
    path_of(d, sizeof d, "open");
    assert_int_equal(mkdir(d, 0700), 0);
    assert_int_equal(chmod(d, 0777), 0);
    assert_int_equal(tm_dir_open_checked(d, 0), -EPERM);
    assert_non_null(strstr(tm_last_error(), "writable by others"));
    assert_int_equal(chmod(d, 0770), 0);
    assert_int_equal(tm_dir_open_checked(d, 0), -EPERM);
    int fd = tm_dir_open_checked(d, TM_SAFE_WRITABLE_OK);
    assert_true(fd >= 0);
    close(fd);
}

static void test_dir_of_another_user_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* chown to nobody needs root */
    char d[300], want[400];
    path_of(d, sizeof d, "theirs");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(chown(d, NOBODY, NOBODY), 0);
    assert_int_equal(tm_dir_open_checked(d, 0), -EPERM);
    snprintf(want, sizeof want, "%s: owned by uid %d", d, NOBODY);
    assert_string_equal(tm_last_error(), want);
    /* Making it "private" does not adopt it either. */
    assert_int_equal(tm_dir_make_private(d, 0700, TM_SAFE_WRITABLE_OK, NULL), -EPERM);
}

static void test_file_of_another_user_is_not_overwritten(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char p[300];
    path_of(p, sizeof p, "theirs.html");
    write_text(p, "theirs");
    assert_int_equal(chown(p, NOBODY, NOBODY), 0);
    assert_int_equal(tm_file_open_output(p, 0644), -EPERM);
    assert_non_null(strstr(tm_last_error(), "owned by uid 65534"));
    assert_content(p, "theirs");
}

static void test_make_private_creates_the_last_component_only_with_exact_mode(void **state)
{
    (void)state;
    char d[300], deep[400];
    path_of(d, sizeof d, "run");
    snprintf(deep, sizeof deep, "%s/a/b", tmp);
    bool created = false;
    mode_t old = umask(022);
    int fd = tm_dir_make_private(d, 0750, 0, &created);
    umask(old);
    assert_true(fd >= 0);
    assert_true(created);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0750);
    close(fd);
    /* Again: accepted, not created, mode left alone. */
    fd = tm_dir_make_private(d, 0700, 0, &created);
    assert_true(fd >= 0);
    assert_false(created);
    close(fd);
    assert_int_equal(tm_dir_make_private(deep, 0700, 0, NULL), -ENOENT);
    fd = tm_dir_make_private(deep, 0700, TM_SAFE_PARENTS, &created);
    assert_true(fd >= 0);
    assert_true(created);
    close(fd);
}

static void test_make_private_refuses_a_regular_file(void **state)
{
    (void)state;
    char p[300];
    path_of(p, sizeof p, "file");
    write_text(p, "x");
    assert_int_equal(tm_dir_make_private(p, 0700, 0, NULL), -ENOTDIR);
}

static void test_make_temp_never_reuses_and_is_private(void **state)
{
    (void)state;
    char planted[300];
    path_of(planted, sizeof planted, ".python");
    assert_int_equal(mkdir(planted, 0777), 0);
    int d = open_tmp();
    char n1[32], n2[32];
    int a = tm_dir_make_temp(d, ".python-", 0700, n1, sizeof n1);
    int b = tm_dir_make_temp(d, ".python-", 0700, n2, sizeof n2);
    assert_true(a >= 0 && b >= 0);
    assert_string_not_equal(n1, n2);
    assert_int_equal(strncmp(n1, ".python-", 8), 0);
    assert_int_equal(strlen(n1), 14);
    struct stat st;
    assert_int_equal(fstat(a, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(st.st_uid, geteuid());
    close(a);
    close(b);
    close(d);
}

/* --------------------------------------------------------------- secrets */

static const char *redact(const char *const *argv, int argc, int i)
{
    static char buf[128];
    return tm_arg_redact(argv, argc, i, buf, sizeof buf);
}

static void test_secret_arguments_are_redacted(void **state)
{
    (void)state;
    const char *argv[] = {"python",
                          "train.py",
                          "--api-key=abc",
                          "--password",
                          "xyz",
                          "HF_TOKEN=zzz",
                          "--lr=0.1",
                          "--Client-Secret",
                          "--verbose",
                          "--epochs",
                          "3",
                          "data_key_file.txt",
                          "--ACCESS_TOKEN=q"};
    int n = (int)(sizeof argv / sizeof argv[0]);
    assert_string_equal(redact(argv, n, 0), "python");
    assert_string_equal(redact(argv, n, 1), "train.py");
    assert_string_equal(redact(argv, n, 2), "--api-key=<redacted>");
    assert_string_equal(redact(argv, n, 3), "--password");
    assert_string_equal(redact(argv, n, 4), "<redacted>");
    assert_string_equal(redact(argv, n, 5), "HF_TOKEN=<redacted>");
    assert_string_equal(redact(argv, n, 6), "--lr=0.1");
    assert_string_equal(redact(argv, n, 7), "--Client-Secret");
    /* The word after a secret option is its value unless it is an option. */
    assert_string_equal(redact(argv, n, 8), "--verbose");
    assert_string_equal(redact(argv, n, 10), "3");
    /* A plain word is not a name=value: kept even with "key" in it. */
    assert_string_equal(redact(argv, n, 11), "data_key_file.txt");
    assert_string_equal(redact(argv, n, 12), "--ACCESS_TOKEN=<redacted>");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_at_makes_a_new_file_with_exactly_the_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_create_at_refuses_a_planted_symlink_and_leaves_its_target, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_at_refuses_an_existing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_create_refuses_a_symlink_and_reuse_does_not_truncate_through_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reuse_truncates_a_regular_file_of_ours, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fifo_is_refused_without_blocking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_link_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_output_is_created_or_truncated_and_may_go_through_a_symlinked_dir, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_output_refuses_a_symlink_at_the_last_component, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_file_mode_follows_the_directory_read_bits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_replace_writes_the_content_and_replaces_a_planted_symlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_ignores_a_planted_temporary_name, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replace_is_atomic_a_reader_sees_old_or_new_never_a_mix,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_dir_open_checked_refuses_a_symlink_even_with_a_trailing_slash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_writable_by_others_is_refused_unless_allowed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_of_another_user_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_of_another_user_is_not_overwritten, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_make_private_creates_the_last_component_only_with_exact_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_make_private_refuses_a_regular_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_make_temp_never_reuses_and_is_private, setup,
                                        teardown),
        cmocka_unit_test(test_secret_arguments_are_redacted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
