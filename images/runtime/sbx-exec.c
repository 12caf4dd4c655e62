/*
 * sbx-exec: the launcher of every `exec` call's program (sandbox-agent/tools/exec.ts).
 *
 *   sbx-exec [--stderr-to-stdout] -- PROGRAM [ARG...]
 *
 * Runs as the tool user (the agent spawns it with the user's uid and gid) and, before it execs
 * PROGRAM (execvp(3): found through the PATH of the call's environment, a file without a
 * shebang run by /bin/sh):
 *   - sets its own oom_score_adj to 1000 (proc(5); raising it needs no privilege), which the
 *     program and its children inherit, so the kernel's OOM killer takes a tool's processes
 *     before the agent;
 *   - with --stderr-to-stdout, makes stderr a copy of stdout (dup2(2)), so both streams land in
 *     one pipe in write order (`combinedOutput`).
 * A shell did both before; this is one small static exec instead of a shell's start.
 *
 * A PROGRAM that cannot be run ends the launcher with a shell's status (bash(1) "EXIT STATUS"):
 * 127 when it is not found, 126 when it is found but cannot be executed, and a line on stderr
 * naming it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int combine = 0;
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--stderr-to-stdout") == 0) {
      combine = 1;
    } else {
      fprintf(stderr, "sbx-exec: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    fputs("usage: sbx-exec [--stderr-to-stdout] -- PROGRAM [ARG...]\n", stderr);
    return 2;
  }
  char **program = &argv[i + 1];

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

  execvp(program[0], program);
  int err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    fprintf(stderr, "sbx-exec: %s: command not found\n", program[0]);
    return 127;
  }
  fprintf(stderr, "sbx-exec: %s: %s\n", program[0], strerror(err));
  return 126;
}
