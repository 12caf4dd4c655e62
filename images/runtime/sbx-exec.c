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
 *
 *   sbx-exec --serve
 *
 * The spawn server (sandbox-agent/host/tool-spawner.ts): started once by the agent, as root, it
 * forks each exec call's process on the agent's request, so the agent's Node process, some
 * 60 MiB, is never forked per call: a fork copies the page tables of the whole process and the
 * exec tears them down again, about 8 ms of CPU a call on a 2-core VM against 2 ms from here.
 * Each child drops to the requested uid and gid, enters its working directory as that user,
 * starts its own session (setsid: its pid is its process group, as `detached: true` did), takes
 * three fresh pipes as stdin, stdout and stderr, and then does what the launcher above does.
 * The agent opens the pipes' other ends through /proc/<server>/fd/<n> (a pipe opened there is a
 * new open file of the same pipe, proc(5)) and then asks the server to close its own.
 *
 * Protocol, on the server's stdin (requests) and stdout (replies), integers little-endian:
 *   request  = u32 body length, body
 *   body     = 'S' u32 id, u32 uid, u32 gid, u32 argc, u32 envc, then NUL-terminated strings:
 *              cwd, argc launcher arguments (as for the launcher above), envc "NAME=value"
 *            | 'C' u32 id: close the server's ends of call id's pipes
 *   reply    = 24 bytes: u8 kind, 3 zero bytes, u32 id, i32 a, i32 b, i32 c, i32 d
 *              'S' spawned: a = pid, b = stdin's write end, c = stdout's read end, d = stderr's
 *              'E' not spawned, nothing ran: a = errno (setsid, setgid, setuid, chdir, pipe, fork)
 *              'X' exited: a = pid, b = its wait status (waitpid(2))
 * The server exits when its stdin ends (the agent is gone); children it leaves go to init.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

/* Makes this process, and what it execs and forks, the first the kernel's OOM killer takes. */
static void set_oom_score_adj(void) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    /* A failed write leaves the default: the agent's own protection is then what it was. */
    if (write(fd, "1000", 4) != 4) errno = 0;
    close(fd);
  }
}

/* The launcher: argv as for `sbx-exec [options] -- PROGRAM`, argv[0] ignored. Returns only on failure, with a shell's status. */
static int launch(int argc, char **argv) {
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

  set_oom_score_adj();
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

/* A request's largest body: the kernel's own limit on argv plus environment is smaller (ARG_MAX). */
#define MAX_BODY (16u << 20)

/* A spawned call's process and the server's ends of its pipes, until the agent took its own (-1: closed). */
struct call {
  uint32_t id;
  pid_t pid;
  int fds[3];
};

static struct call *calls;
static size_t call_count, call_capacity;

static void die(const char *what) {
  fprintf(stderr, "sbx-exec --serve: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void write_all(int fd, const void *data, size_t size) {
  const char *p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("reply");
    p += n;
    size -= (size_t)n;
  }
}

static void reply(char kind, uint32_t id, int32_t a, int32_t b, int32_t c, int32_t d) {
  unsigned char r[24] = {(unsigned char)kind};
  memcpy(r + 4, &id, 4);
  memcpy(r + 8, &a, 4);
  memcpy(r + 12, &b, 4);
  memcpy(r + 16, &c, 4);
  memcpy(r + 20, &d, 4);
  write_all(STDOUT_FILENO, r, sizeof r);
}

static uint32_t u32_at(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static void close_fds(struct call *c) {
  for (int k = 0; k < 3; k++)
    if (c->fds[k] >= 0) close(c->fds[k]), c->fds[k] = -1;
}

static void forget(size_t i) {
  calls[i] = calls[--call_count];
}

/* In the forked child: reports `err` to the server through the status pipe and ends. */
static void child_failed(int status_fd, int err) {
  if (write(status_fd, &err, sizeof err) != sizeof err) err = 0;
  _exit(127);
}

/* Body 'S': forks the call's process; replies 'S' or 'E'. Returns -1 for a malformed body. */
static int spawn_call(const unsigned char *body, uint32_t size) {
  if (size < 21) return -1;
  uint32_t id = u32_at(body + 1), uid = u32_at(body + 5), gid = u32_at(body + 9);
  uint32_t argc = u32_at(body + 13), envc = u32_at(body + 17);
  if (argc < 1 || argc > size || envc > size) return -1;
  /* Strings: cwd, argc arguments, envc variables, each NUL-terminated within the body. */
  size_t strings = 1 + (size_t)argc + envc;
  char **list = calloc(strings + 2, sizeof(char *));
  if (list == NULL) die("calloc");
  const char *p = (const char *)body + 21, *end = (const char *)body + size;
  for (size_t k = 0; k < strings; k++) {
    const char *nul = memchr(p, '\0', (size_t)(end - p));
    if (nul == NULL) return free(list), -1;
    list[k] = (char *)p;
    p = nul + 1;
  }
  const char *cwd = list[0];
  /* argv: a placeholder argv[0] for launch(), then the launcher arguments, NULL-terminated. */
  char **argv = calloc((size_t)argc + 2, sizeof(char *));
  char **envp = calloc((size_t)envc + 1, sizeof(char *));
  if (argv == NULL || envp == NULL) die("calloc");
  argv[0] = "sbx-exec";
  for (uint32_t k = 0; k < argc; k++) argv[k + 1] = list[1 + k];
  for (uint32_t k = 0; k < envc; k++) envp[k] = list[1 + argc + k];

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  int failed = 0;
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0) failed = errno;
  pid_t pid = failed ? -1 : fork();
  if (!failed && pid < 0) failed = errno;
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0) child_failed(status[1], errno);
    if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) child_failed(status[1], errno);
    /* Now, as root: after the drop the process is not dumpable until it execs (its /proc files
     * stay root's, which also keeps the server's memory it copied, other calls' requests
     * included, from the tool user), so launch() could not raise it itself. */
    set_oom_score_adj();
    if (gid != UINT32_MAX) {
      /* As libuv does for a spawn with a gid: no supplementary groups of root's stay (EPERM when not root). */
      if (setgroups(0, NULL) < 0 && errno != EPERM) child_failed(status[1], errno);
      if (setgid(gid) < 0) child_failed(status[1], errno);
    }
    if (uid != UINT32_MAX && setuid(uid) < 0) child_failed(status[1], errno);
    /* As the user: a directory only root may enter is refused here, not entered before the drop. */
    if (chdir(cwd) < 0) child_failed(status[1], errno);
    environ = envp;
    _exit(launch((int)argc + 1, argv));
  }
  /* The child's ends are the child's alone now; a status pipe that ends empty means it exec'd (or its launcher ran and reported). */
  int child_ends[] = {in[0], out[1], err[1], status[1]};
  for (int k = 0; k < 4; k++)
    if (child_ends[k] >= 0) close(child_ends[k]);
  if (pid > 0) {
    int child_err = 0;
    ssize_t n;
    do n = read(status[0], &child_err, sizeof child_err);
    while (n < 0 && errno == EINTR);
    if (n == sizeof child_err) {
      failed = child_err;
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
    }
  }
  if (status[0] >= 0) close(status[0]);
  free(list);
  free(argv);
  free(envp);
  if (failed) {
    int ours[] = {in[1], out[0], err[0]};
    for (int k = 0; k < 3; k++)
      if (ours[k] >= 0) close(ours[k]);
    reply('E', id, failed, 0, 0, 0);
    return 0;
  }
  if (call_count == call_capacity) {
    call_capacity = call_capacity ? call_capacity * 2 : 16;
    calls = realloc(calls, call_capacity * sizeof *calls);
    if (calls == NULL) die("realloc");
  }
  calls[call_count++] = (struct call){id, pid, {in[1], out[0], err[0]}};
  reply('S', id, pid, in[1], out[0], err[0]);
  return 0;
}

/* Body 'C': the agent holds its own ends of call id's pipes; the server's go. */
static int close_call(const unsigned char *body, uint32_t size) {
  if (size != 5) return -1;
  uint32_t id = u32_at(body + 1);
  for (size_t i = 0; i < call_count; i++) {
    if (calls[i].id != id) continue;
    close_fds(&calls[i]);
    if (calls[i].pid < 0) forget(i);
    break;
  }
  return 0;
}

/* Reaps every ended child and replies 'X' for each of ours. */
static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t i = 0; i < call_count; i++) {
      if (calls[i].pid != pid) continue;
      reply('X', calls[i].id, pid, status, 0, 0);
      calls[i].pid = -1;
      if (calls[i].fds[0] < 0 && calls[i].fds[1] < 0 && calls[i].fds[2] < 0) forget(i);
      break;
    }
  }
}

static int serve(void) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0) die("sigprocmask");
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  /* The agent's pipes must not reach a call's process: they are closed at its exec. */
  if (fcntl(STDIN_FILENO, F_SETFD, FD_CLOEXEC) < 0 || fcntl(STDOUT_FILENO, F_SETFD, FD_CLOEXEC) < 0) die("fcntl");
  unsigned char *buf = NULL;
  size_t used = 0, capacity = 0;
  for (;;) {
    struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) == sizeof info) {
      }
      reap();
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (capacity - used < 65536) {
      capacity = capacity ? capacity * 2 : 1 << 20;
      buf = realloc(buf, capacity);
      if (buf == NULL) die("realloc");
    }
    ssize_t n = read(STDIN_FILENO, buf + used, capacity - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read");
    if (n == 0) return 0;
    used += (size_t)n;
    size_t at = 0;
    while (used - at >= 4) {
      uint32_t size = u32_at(buf + at);
      if (size == 0 || size > MAX_BODY) die("request too large");
      if (used - at - 4 < size) {
        if (capacity < size + 4) {
          capacity = size + 4;
          buf = realloc(buf, capacity);
          if (buf == NULL) die("realloc");
        }
        break;
      }
      const unsigned char *body = buf + at + 4;
      int bad = body[0] == 'S' ? spawn_call(body, size) : body[0] == 'C' ? close_call(body, size) : -1;
      if (bad) {
        errno = EPROTO;
        die("malformed request");
      }
      at += 4 + size;
    }
    memmove(buf, buf + at, used - at);
    used -= at;
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--serve") == 0) return serve();
  return launch(argc, argv);
}
