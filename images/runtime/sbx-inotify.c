/*
 * sbx-inotify: watches directory trees with inotify and prints their changes, for the sandbox
 * agent's file watch (sandbox-agent/host/file-watch.ts). Built static by build-runtime.sh into
 * the agent runtime (/opt/sbx/bin/sbx-inotify); the agent runs it as the tool user, so it sees
 * exactly what the tool user may read.
 *
 *   sbx-inotify ROOT...
 *
 * Every directory under each ROOT is watched (symlinks are not followed); directories created or
 * moved in later are added, and what they already hold when the watch is added is reported as
 * created (the race between mkdir and the watch). Renames are paired by inotify's cookie.
 *
 * Output on stdout, one record after another, every field ended by a NUL byte:
 *   KIND TYPE SIZE PATH [PATH2]
 * KIND: c created, m modified, d deleted, r renamed (PATH = from, PATH2 = to), o overflow (the
 * kernel's queue overflowed: events were lost; PATH empty), l watch limit (no watch could be
 * added for PATH: the kernel's max_user_watches), s started (initial scan done; PATH empty).
 * TYPE: f file, d directory, l symlink, o other, - unknown (gone). SIZE: bytes (lstat), -1 unknown.
 * A modification right after the creation or modification of the same file in one read of the
 * queue is left out (sizes are taken after the read).
 * A MOVED_FROM whose MOVED_TO does not follow within PAIR_WAIT_MS is a deletion (moved out of
 * the watched trees); a MOVED_TO without its MOVED_FROM is a creation (moved in).
 * Exits 0 when stdout closes, 2 on bad usage or when inotify cannot be had.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAIR_WAIT_MS 20
#define DIR_MASK                                                                                                   \
  (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | \
   IN_DONT_FOLLOW | IN_EXCL_UNLINK)

static int ifd;
static char **paths; /* watch descriptor -> directory path (NULL: none) */
static int npaths;
static int limit_reported;

static void die(const char *what) {
  fprintf(stderr, "sbx-inotify: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void out_fields(const char *kind, char type, long long size, const char *p1, const char *p2) {
  printf("%s%c%c%c%lld%c%s%c", kind, 0, type, 0, size, 0, p1 ? p1 : "", 0);
  if (p2) printf("%s%c", p2, 0);
  if (ferror(stdout)) exit(0);
}

static void describe(const char *path, char *type, long long *size) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    *type = '-';
    *size = -1;
    return;
  }
  *type = S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd' : S_ISLNK(st.st_mode) ? 'l' : 'o';
  *size = (long long)st.st_size;
}

/* The last record emitted in this read: a modification right after a creation or a modification
   of the same file is left out (its size is taken after the read, so the first record has it). */
static char last_kind;
static char *last_path;

static void emit(const char *kind, const char *path, const char *path2, int gone_isdir) {
  char type;
  long long size;
  if (kind[0] == 'm' && (last_kind == 'c' || last_kind == 'm') && last_path && strcmp(last_path, path) == 0) return;
  last_kind = kind[0];
  free(last_path);
  last_path = strdup(path2 ? path2 : path);
  if (gone_isdir >= 0) {
    type = gone_isdir ? 'd' : '-';
    size = -1;
  } else {
    describe(path2 ? path2 : path, &type, &size);
  }
  out_fields(kind, type, size, path, path2);
}

static void set_path(int wd, const char *path) {
  if (wd >= npaths) {
    int n = npaths ? npaths : 64;
    while (n <= wd) n *= 2;
    paths = realloc(paths, sizeof(char *) * n);
    if (!paths) die("realloc");
    memset(paths + npaths, 0, sizeof(char *) * (n - npaths));
    npaths = n;
  }
  free(paths[wd]);
  paths[wd] = strdup(path);
}

static char *join(const char *dir, const char *name) {
  char *s;
  if (asprintf(&s, "%s/%s", dir, name) < 0) die("asprintf");
  return s;
}

/* Watches `dir` and every directory under it; with `report`, reports each entry found as created. */
static void add_tree(const char *dir, int report) {
  int wd = inotify_add_watch(ifd, dir, DIR_MASK);
  if (wd < 0) {
    if (errno == ENOSPC && !limit_reported) {
      limit_reported = 1;
      out_fields("l", '-', -1, dir, NULL);
    }
    return;
  }
  set_path(wd, dir);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *child = join(dir, e->d_name);
    if (report) emit("c", child, NULL, -1);
    int isdir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      isdir = lstat(child, &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (isdir) add_tree(child, report);
    free(child);
  }
  closedir(d);
}

static int under(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A directory moved within the trees: its watches (and those under it) keep going, renamed. */
static void rename_prefix(const char *from, const char *to) {
  size_t n = strlen(from);
  for (int i = 0; i < npaths; i++) {
    if (!paths[i] || !under(paths[i], from)) continue;
    char *s;
    if (asprintf(&s, "%s%s", to, paths[i] + n) < 0) die("asprintf");
    free(paths[i]);
    paths[i] = s;
  }
}

/* A directory moved out of the trees: stop watching it and everything under it. */
static void drop_prefix(const char *prefix) {
  for (int i = 0; i < npaths; i++) {
    if (!paths[i] || !under(paths[i], prefix)) continue;
    inotify_rm_watch(ifd, i);
    free(paths[i]);
    paths[i] = NULL;
  }
}

/* The MOVED_FROM waiting for its MOVED_TO. */
static struct {
  int active;
  uint32_t cookie;
  int isdir;
  char *path;
} pending;

static void flush_pending(void) {
  if (!pending.active) return;
  emit("d", pending.path, NULL, pending.isdir);
  if (pending.isdir) drop_prefix(pending.path);
  free(pending.path);
  pending.active = 0;
}

static void handle(const struct inotify_event *ev, char **roots, int nroots) {
  if (ev->mask & IN_Q_OVERFLOW) {
    flush_pending();
    out_fields("o", '-', -1, "", NULL);
    /* Directories created meanwhile were never watched: add what is missing (no reports; the
       overflow already tells the reader to resync). */
    for (int i = 0; i < nroots; i++) add_tree(roots[i], 0);
    return;
  }
  if (ev->mask & IN_IGNORED) {
    if (ev->wd >= 0 && ev->wd < npaths) {
      free(paths[ev->wd]);
      paths[ev->wd] = NULL;
    }
    return;
  }
  if (ev->wd < 0 || ev->wd >= npaths || !paths[ev->wd] || ev->len == 0) return;
  char *full = join(paths[ev->wd], ev->name);
  int isdir = (ev->mask & IN_ISDIR) != 0;
  if (ev->mask & IN_MOVED_TO) {
    if (pending.active && pending.cookie == ev->cookie) {
      emit("r", pending.path, full, -1);
      if (isdir) rename_prefix(pending.path, full);
      free(pending.path);
      pending.active = 0;
    } else {
      flush_pending();
      emit("c", full, NULL, -1);
      if (isdir) add_tree(full, 1);
    }
  } else {
    flush_pending();
    if (ev->mask & IN_MOVED_FROM) {
      pending.active = 1;
      pending.cookie = ev->cookie;
      pending.isdir = isdir;
      pending.path = full;
      return;
    }
    if (ev->mask & IN_CREATE) {
      emit("c", full, NULL, -1);
      if (isdir) add_tree(full, 1);
    } else if (ev->mask & IN_DELETE) {
      emit("d", full, NULL, isdir);
    } else if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)) {
      if (!isdir) emit("m", full, NULL, -1);
    }
  }
  free(full);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sbx-inotify ROOT...\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  static char outbuf[1 << 16];
  setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
  ifd = inotify_init1(IN_CLOEXEC);
  if (ifd < 0) die("inotify_init1");
  for (int i = 1; i < argc; i++) add_tree(argv[i], 0);
  out_fields("s", '-', -1, "", NULL);
  fflush(stdout);
  static char buf[1 << 16] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    struct pollfd p = {.fd = ifd, .events = POLLIN};
    int r = poll(&p, 1, pending.active ? PAIR_WAIT_MS : -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (r == 0) {
      flush_pending();
      if (fflush(stdout) != 0) return 0;
      continue;
    }
    ssize_t len = read(ifd, buf, sizeof buf);
    if (len < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      die("read");
    }
    last_kind = 0;
    for (char *q = buf; q < buf + len;) {
      const struct inotify_event *ev = (const struct inotify_event *)q;
      handle(ev, argv + 1, argc - 1);
      q += sizeof(struct inotify_event) + ev->len;
    }
    if (fflush(stdout) != 0) return 0;
  }
}
