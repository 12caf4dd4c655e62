/*
 * sbx-exec: the launcher of every `exec` call's program (sandbox-agent/tools/exec.ts).
 *
 *   sbx-exec [--stderr-to-stdout] [--shell SHELL] -- PROGRAM [ARG...]
 *
 * Runs as the tool user (the agent spawns it with the user's uid and gid) and, before it execs
 * PROGRAM:
 *   - sets its own oom_score_adj to 1000 (proc(5); raising it needs no privilege), which the
 *     program and its children inherit, so the kernel's OOM killer takes a tool's processes
 *     before the agent;
 *   - with --stderr-to-stdout, makes stderr a copy of stdout (dup2(2)), so both streams land in
 *     one pipe in write order (`combinedOutput`);
 *   - sets PWD to the working directory, as a shell would have exported it.
 * A shell (`bash -c 'exec "$@"'`) did all of this before; this is one small static exec
 * instead of a shell's start, and it finds and runs PROGRAM as that shell did (bash(1),
 * "COMMAND EXECUTION"): a name without a slash is looked up in the PATH of the call's
 * environment, and a file the kernel cannot execute (ENOEXEC: a script without `#!`) is run by
 * SHELL (default /bin/sh) as a script.
 *
 * A PROGRAM that cannot be run ends the launcher with a shell's status (bash(1), "EXIT STATUS")
 * and a line on stderr naming it: 127 when it is not found, 126 when it is found but cannot be
 * executed (no permission, a directory, a missing `#!` interpreter: "bad interpreter").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes PATH's first executable regular file named `name` into `out`; 0 when found. */
static int find_in_path(const char *name, char *out, size_t size) {
  const char *path = getenv("PATH");
  if (path == NULL || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *dir = path;; ) {
    const char *end = strchr(dir, ':');
    size_t len = end ? (size_t)(end - dir) : strlen(dir);
    /* An empty entry is the current directory (POSIX XBD 8.3). */
    int n = len == 0 ? snprintf(out, size, "%s", name) : snprintf(out, size, "%.*s/%s", (int)len, dir, name);
    struct stat st;
    if (n > 0 && (size_t)n < size && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 0;
    if (end == NULL) return -1;
    dir = end + 1;
  }
}

int main(int argc, char **argv) {
  int combine = 0;
  const char *shell = "/bin/sh";
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--stderr-to-stdout") == 0) {
      combine = 1;
    } else if (strcmp(argv[i], "--shell") == 0 && i + 1 < argc) {
      shell = argv[++i];
    } else {
      fprintf(stderr, "sbx-exec: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    fputs("usage: sbx-exec [--stderr-to-stdout] [--shell SHELL] -- PROGRAM [ARG...]\n", stderr);
    return 2;
  }
  char **program = &argv[i + 1];
  int count = argc - (i + 1);

  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    /* A failed write leaves the default: the agent's own protection is then what it was. */
    if (write(fd, "1000", 4) != 4) errno = 0;
    close(fd);
  }
  if (combine && dup2(STDOUT_FILENO, STDERR_FILENO) < 0) {
    perror("sbx-exec: dup2");
    return 126;
  }
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) != NULL) setenv("PWD", cwd, 1);

  char found[PATH_MAX];
  const char *file = program[0];
  if (strchr(file, '/') == NULL) {
    if (find_in_path(file, found, sizeof found) != 0) {
      fprintf(stderr, "sbx-exec: %s: command not found\n", file);
      return 127;
    }
    file = found;
  }
  execv(file, program);
  int err = errno;
  if (err == ENOEXEC) {
    /* As a shell does: the file is a script in its language. */
    char **script = calloc((size_t)count + 2, sizeof(char *));
    if (script != NULL) {
      script[0] = (char *)shell;
      script[1] = (char *)file;
      for (int k = 1; k < count; k++) script[k + 1] = program[k];
      execv(shell, script);
      err = errno;
    }
  }
  struct stat st;
  if (err == ENOENT && stat(file, &st) == 0) {
    fprintf(stderr, "sbx-exec: %s: bad interpreter: %s\n", program[0], strerror(err));
    return 126;
  }
  if (err == ENOENT) {
    fprintf(stderr, "sbx-exec: %s: %s\n", program[0], strerror(err));
    return 127;
  }
  fprintf(stderr, "sbx-exec: %s: %s\n", program[0], strerror(err));
  return 126;
}
