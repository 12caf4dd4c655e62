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
 *              'E' not spawned, nothing ran: a = errno (setsid, setgid, setuid, chdir, pipe, fork;
 *                  E2BIG from the program's exec; ETIMEDOUT: not exec'd within 10 s, killed)
 *              'X' exited: a = pid, b = its wait status (waitpid(2)); always after its 'S'
 * Requests are served while others start: a child's start is watched through a status pipe of
 * its own, so one that a tool-user process stopped before its exec holds up no other call.
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
#include <time.h>
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

/* In a child of the spawn server: the write end of its status pipe until its program's exec (-1 otherwise). */
static int start_status_fd = -1;

/* In a child of the spawn server: reports `err` through the status pipe (the call is refused, nothing ran) and ends. */
static void start_failed(int err) {
  if (write(start_status_fd, &err, sizeof err) != sizeof err) err = 0;
  _exit(127);
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
  /* Too long an argv or environment: nothing ran, as when Node's spawn of the launcher refused it. */
  if (err == E2BIG && start_status_fd >= 0) start_failed(err);
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

/* A request's largest body: the kernel's own limit on argv plus environment is lower (ARG_MAX). */
#define MAX_BODY (16u << 20)
/* The request buffer kept between requests; one grown for a large request is freed once empty. */
#define BUFFER_KEEP (1u << 20)
/*
 * How long a child may take from its fork to its program's exec, ms. Once it dropped to the
 * tool user, a process of that user can stop it (SIGSTOP); past this the server kills it and
 * refuses the call ('E' ETIMEDOUT): the program never started.
 */
#define START_DEADLINE_MS 10000

/*
 * A call's process: its status pipe's read end while it starts (-1 once it exec'd or failed),
 * its start deadline, its wait status once reaped, and the server's ends of its pipes until the
 * agent took its own (-1: closed). `refused`: answered 'E', so no 'X' follows.
 */
struct call {
  uint32_t id;
  pid_t pid;
  int status_fd;
  long long deadline_ms;
  int refused, reaped, wait_status;
  int fds[3];
};

static struct call *calls;
static size_t call_count, call_capacity;

static void die(const char *what) {
  fprintf(stderr, "sbx-exec --serve: %s: %s\n", what, strerror(errno));
  exit(2);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
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

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd), *fd = -1;
}

/* Drops call i once nothing more is owed on it: started or refused, reaped, its pipe ends closed. Returns whether it did. */
static int settle(size_t i) {
  struct call *c = &calls[i];
  if (c->status_fd >= 0 || !c->reaped || c->fds[0] >= 0 || c->fds[1] >= 0 || c->fds[2] >= 0) return 0;
  calls[i] = calls[--call_count];
  return 1;
}

/* Call i's program has exec'd (its status pipe ended empty): 'S', and 'X' when it has ended already. */
static void started(struct call *c) {
  reply('S', c->id, c->pid, c->fds[0], c->fds[1], c->fds[2]);
  if (c->reaped) reply('X', c->id, c->pid, c->wait_status, 0, 0);
}

/* Call i will not start: 'E' with `err`, its pipes closed, its child killed if it still runs. */
static void refuse(struct call *c, int err) {
  if (!c->reaped) kill(c->pid, SIGKILL);
  c->refused = 1;
  for (int k = 0; k < 3; k++) close_fd(&c->fds[k]);
  reply('E', c->id, err, 0, 0, 0);
}

/* Body 'S': forks the call's process, which reports through its status pipe (see `starting`). Returns -1 for a malformed body. */
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
    start_status_fd = status[1];
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0) start_failed(errno);
    if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) start_failed(errno);
    /* Now, as root: after the drop the process is not dumpable until it execs (its /proc files
     * stay root's, which also keeps the server's memory it copied, other calls' requests
     * included, from the tool user), so launch() could not raise it itself. */
    set_oom_score_adj();
    if (gid != UINT32_MAX) {
      /* As libuv does for a spawn with a gid: no supplementary groups of root's stay (EPERM when not root). */
      if (setgroups(0, NULL) < 0 && errno != EPERM) start_failed(errno);
      if (setgid(gid) < 0) start_failed(errno);
    }
    if (uid != UINT32_MAX && setuid(uid) < 0) start_failed(errno);
    /* As the user: a directory only root may enter is refused here, not entered before the drop. */
    if (chdir(cwd) < 0) start_failed(errno);
    environ = envp;
    _exit(launch((int)argc + 1, argv));
  }
  /* The child's ends are the child's alone now. */
  int child_ends[] = {in[0], out[1], err[1], status[1]};
  for (int k = 0; k < 4; k++)
    if (child_ends[k] >= 0) close(child_ends[k]);
  free(list);
  free(argv);
  free(envp);
  if (failed) {
    int ours[] = {in[1], out[0], err[0], status[0]};
    for (int k = 0; k < 4; k++)
      if (ours[k] >= 0) close(ours[k]);
    reply('E', id, failed, 0, 0, 0);
    return 0;
  }
  if (call_count == call_capacity) {
    call_capacity = call_capacity ? call_capacity * 2 : 16;
    calls = realloc(calls, call_capacity * sizeof *calls);
    if (calls == NULL) die("realloc");
  }
  calls[call_count++] = (struct call){id, pid, status[0], now_ms() + START_DEADLINE_MS, 0, 0, 0, {in[1], out[0], err[0]}};
  return 0;
}

/* Call i's status pipe is readable: empty at its end means the program exec'd; an errno means it will not start. */
static void starting(struct call *c) {
  int child_err = 0;
  ssize_t n;
  do n = read(c->status_fd, &child_err, sizeof child_err);
  while (n < 0 && errno == EINTR);
  close_fd(&c->status_fd);
  if (n == sizeof child_err) refuse(c, child_err);
  else started(c);
}

/* Body 'C': the agent holds its own ends of call id's pipes; the server's go. */
static int close_call(const unsigned char *body, uint32_t size) {
  if (size != 5) return -1;
  uint32_t id = u32_at(body + 1);
  for (size_t i = 0; i < call_count; i++) {
    if (calls[i].id != id || calls[i].status_fd >= 0) continue;
    for (int k = 0; k < 3; k++) close_fd(&calls[i].fds[k]);
    settle(i);
    break;
  }
  return 0;
}

/* Reaps every ended child: 'X' for a started call's, kept for one still starting, none for a refused one's. */
static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t i = 0; i < call_count; i++) {
      struct call *c = &calls[i];
      if (c->pid != pid || c->reaped) continue;
      c->reaped = 1;
      c->wait_status = status;
      if (c->status_fd < 0 && !c->refused) reply('X', c->id, pid, status, 0, 0);
      settle(i);
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
  struct pollfd *fds = NULL;
  size_t fds_capacity = 0;
  for (;;) {
    /* The agent's requests, SIGCHLD, and the status pipe of every call still starting. */
    if (fds_capacity < call_count + 2) {
      fds_capacity = call_count + 2;
      fds = realloc(fds, fds_capacity * sizeof *fds);
      if (fds == NULL) die("realloc");
    }
    fds[0] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
    fds[1] = (struct pollfd){sfd, POLLIN, 0};
    nfds_t watched = 2;
    long long next_deadline = -1;
    for (size_t i = 0; i < call_count; i++) {
      if (calls[i].status_fd < 0) continue;
      fds[watched++] = (struct pollfd){calls[i].status_fd, POLLIN, 0};
      if (next_deadline < 0 || calls[i].deadline_ms < next_deadline) next_deadline = calls[i].deadline_ms;
    }
    long long wait_ms = next_deadline < 0 ? -1 : next_deadline - now_ms();
    if (poll(fds, watched, next_deadline < 0 ? -1 : wait_ms < 0 ? 0 : (int)wait_ms) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    /* Starts first: an ended child's 'X' must follow its 'S'. */
    long long now = now_ms();
    for (size_t i = 0; i < call_count;) {
      struct call *c = &calls[i];
      int ready = 0;
      for (nfds_t k = 2; k < watched; k++)
        if (fds[k].fd == c->status_fd && fds[k].revents) ready = 1;
      if (c->status_fd >= 0 && ready) starting(c);
      else if (c->status_fd >= 0 && now >= c->deadline_ms) close_fd(&c->status_fd), refuse(c, ETIMEDOUT);
      if (!settle(i)) i++;
    }
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof info) == sizeof info) {
      }
      reap();
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (capacity - used < 65536) {
      capacity = capacity ? capacity * 2 : BUFFER_KEEP;
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
    /* Requests carry calls' environments, secrets among them: what was read goes, not only forward. */
    memmove(buf, buf + at, used - at);
    explicit_bzero(buf + used - at, at);
    used -= at;
    if (used == 0 && capacity > BUFFER_KEEP) {
      free(buf);
      buf = NULL;
      capacity = 0;
    }
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--serve") == 0) return serve();
  return launch(argc, argv);
}
