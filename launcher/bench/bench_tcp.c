/* The raw loopback TCP baseline of `pstrain bench`: what the wire itself carries on this
 * machine with the same traffic pattern as pstrain's push+pull rounds, and nothing else.
 *
 * A server process accepts N connections and, for each independently, reads S bytes into
 * an S-byte buffer, then writes S bytes back from another S-byte buffer, round after round.
 * N client processes each write S bytes from an S-byte buffer in 1 MiB writes, then read S
 * bytes back into another S-byte buffer. Buffers are written once before the timed rounds
 * so page faults stay out of them; TCP_NODELAY is on; socket buffers are the kernel's
 * defaults (autotuned), as for any plain program. Clients report through shared memory. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"
#include "launcher/bench/bench.h"

#define IO_MAX (1u << 20) /* bytes per write (and at most per read) */
#define CHILD_ALARM_S 300 /* a stuck child ends itself */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

void pl_bench_reduce(const pl_bench_client *c, int n, size_t bytes, pl_bench_figs *f) {
  double first = 0, last = 0, push = 0, pull = 0, srv = -1, loop = -1, cpu = 0;
  long total = 0;
  for (int i = 0; i < n; i++) {
    if (i == 0 || c[i].t_first < first) first = c[i].t_first;
    if (i == 0 || c[i].t_last > last) last = c[i].t_last;
    push += c[i].push_s / n;
    pull += c[i].pull_s / n;
    total += c[i].rounds;
    if (c[i].server_cpu_s > srv) srv = c[i].server_cpu_s;
    if (c[i].server_loop_cpu_s > loop) loop = c[i].server_loop_cpu_s;
    cpu += c[i].cpu_s;
  }
  f->server_cpu_s = srv;
  f->server_loop_cpu_s = loop;
  f->clients_cpu_s = cpu;
  double moved = (double)bytes * (double)total; /* each way */
  f->rounds = n > 0 ? c[0].rounds : 0;
  f->wall_s = last - first;
  f->push_rate = push > 0 ? moved / push : 0;
  f->pull_rate = pull > 0 ? moved / pull : 0;
  f->combined_rate = f->wall_s > 0 ? 2 * moved / f->wall_s : 0;
  f->p50_s = f->p99_s = 0;
  double *all = total > 0 ? malloc((size_t)total * sizeof *all) : NULL;
  if (all) {
    long k = 0;
    for (int i = 0; i < n; i++)
      for (long r = 0; r < c[i].rounds; r++) all[k++] = c[i].lat[r];
    qsort(all, (size_t)k, sizeof *all, cmp_double);
    f->p50_s = all[(size_t)((k - 1) * 0.50)];
    f->p99_s = all[(size_t)((k - 1) * 0.99 + 0.5)];
    free(all);
  }
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void *fault_in(size_t bytes) {
  char *p = malloc(bytes ? bytes : 1);
  if (p) memset(p, 0x5a, bytes);
  return p;
}

/* ---- server: one process, every connection independently read-then-write ---- */

typedef struct {
  int fd;
  int writing;   /* 0: reading the push, 1: writing the reply */
  size_t pos;
} srv_conn;

static int server_main(int lfd, int clients, size_t bytes) {
  char *in = fault_in(bytes), *out = fault_in(bytes);
  srv_conn *cs = calloc((size_t)clients, sizeof *cs);
  struct pollfd *pfd = calloc((size_t)clients, sizeof *pfd);
  if (!in || !out || !cs || !pfd) return 1;
  for (int i = 0; i < clients; i++) {
    cs[i].fd = accept(lfd, NULL, NULL);
    if (cs[i].fd < 0) return 1;
    nodelay(cs[i].fd);
  }
  close(lfd);
  int open_conns = clients;
  while (open_conns > 0) {
    for (int i = 0; i < clients; i++) {
      pfd[i].fd = cs[i].fd;
      pfd[i].events = cs[i].writing ? POLLOUT : POLLIN;
      pfd[i].revents = 0;
    }
    if (poll(pfd, (nfds_t)clients, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < clients; i++) {
      srv_conn *c = &cs[i];
      if (c->fd < 0 || !pfd[i].revents) continue;
      size_t want = bytes - c->pos < IO_MAX ? bytes - c->pos : IO_MAX;
      ssize_t n = c->writing ? send(c->fd, out + c->pos, want, MSG_DONTWAIT)
                             : recv(c->fd, in + c->pos, want, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) { /* the client is done (or failed): close this one */
        close(c->fd);
        c->fd = -1;
        pfd[i].fd = -1;
        open_conns--;
        continue;
      }
      c->pos += (size_t)n;
      if (c->pos == bytes) {
        c->pos = 0;
        c->writing = !c->writing;
      }
    }
  }
  return 0;
}

/* ---- clients ---- */

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len < IO_MAX ? len : IO_MAX);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int read_all(int fd, char *p, size_t len) {
  while (len > 0) {
    ssize_t n = read(fd, p, len < IO_MAX ? len : IO_MAX);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int client_main(int port, pid_t srv, size_t bytes, long rounds, long warmup,
                       pl_bench_client *res) {
  char *out = fault_in(bytes), *in = fault_in(bytes);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (!out || !in || fd < 0) return 1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) return 1;
  nodelay(fd);
  for (long r = 0; r < warmup + rounds; r++) {
    double t0 = pst_now();
    if (write_all(fd, out, bytes) < 0) return 1;
    double t1 = pst_now();
    if (read_all(fd, in, bytes) < 0) return 1;
    double t2 = pst_now();
    if (r < warmup) continue;
    if (r == warmup) {
      res->t_first = t0;
      res->cpu_s = pst_proc_self_cpu_s();
      res->server_cpu_s = pst_proc_cpu_s((long)srv);
    }
    res->t_last = t2;
    res->push_s += t1 - t0;
    res->pull_s += t2 - t1;
    res->lat[r - warmup] = t2 - t0;
  }
  res->cpu_s = pst_proc_self_cpu_s() - res->cpu_s;
  double s1 = pst_proc_cpu_s((long)srv);
  res->server_cpu_s = s1 >= 0 && res->server_cpu_s >= 0 ? s1 - res->server_cpu_s : -1;
  res->server_loop_cpu_s = -1; /* one thread: its CPU is all of it */
  close(fd);
  return 0;
}

int pl_bench_listen(int *port, char *err, size_t errlen) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 64) < 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
    int e = errno;
    snprintf(err, errlen, "cannot listen on 127.0.0.1: %s", strerror(e));
    if (lfd >= 0) close(lfd);
    return -e;
  }
  *port = ntohs(a.sin_port);
  return lfd;
}

int pl_bench_tcp(size_t bytes, int clients, long rounds, long warmup, pl_bench_figs *f,
                 char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->peak_rss_kib = -1;
  /* Shared with the children: their timings and latencies. */
  size_t shared = (size_t)clients * (sizeof(pl_bench_client) + (size_t)rounds * sizeof(double));
  char *mem = mmap(NULL, shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %zu bytes: %s", shared, strerror(errno));
    return -errno;
  }
  memset(mem, 0, shared);
  pl_bench_client *res = (pl_bench_client *)mem;
  double *lat = (double *)(mem + (size_t)clients * sizeof(pl_bench_client));

  int port;
  int lfd = pl_bench_listen(&port, err, errlen);
  if (lfd < 0) {
    munmap(mem, shared);
    return lfd;
  }
  fflush(NULL);
  pid_t pids[1 + 256];
  int n_pids = 0, bad = 0;
  pid_t srv = fork();
  if (srv == 0) {
    alarm(CHILD_ALARM_S);
    _exit(server_main(lfd, clients, bytes));
  }
  close(lfd);
  if (srv < 0) bad = 1;
  else pids[n_pids++] = srv;
  for (int i = 0; i < clients && !bad && i < 256; i++) {
    res[i].lat = lat + (size_t)i * (size_t)rounds;
    res[i].rounds = rounds;
    pid_t p = fork();
    if (p == 0) {
      alarm(CHILD_ALARM_S);
      _exit(client_main(port, srv, bytes, rounds, warmup, &res[i]));
    }
    if (p < 0) bad = 1;
    else pids[n_pids++] = p;
  }
  if (bad && srv > 0) kill(srv, SIGTERM);
  for (int i = 0; i < n_pids; i++) {
    int st = 0;
    if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    if (bad && i == 0) {
      /* The server failed: do not leave clients waiting on it. */
      for (int j = 1; j < n_pids; j++) kill(pids[j], SIGTERM);
    }
  }
  if (bad) {
    snprintf(err, errlen, "the raw TCP baseline failed (%zu bytes, %d clients)", bytes, clients);
    munmap(mem, shared);
    return -EIO;
  }
  /* res and the latencies live in the shared mapping: the children's figures are here, and
   * res[i].lat was set before the fork. */
  pl_bench_reduce(res, clients, bytes, f);
  munmap(mem, shared);
  return 0;
}
