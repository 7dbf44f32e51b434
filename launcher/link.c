/* Emulated links (launcher/link.h): network namespaces, a bridge, veths and tc. */
#include "launcher/link.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- parsing ---- */

/* A number followed by one of units (with its factor); the text copied into out. */
static int number_unit(const char *s, size_t len, const char *const *units, const double *factors,
                       int nunits, double *value, char *out, size_t outlen) {
  char buf[32];
  if (len == 0 || len >= sizeof buf) return -EINVAL;
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end == buf || errno || !(v >= 0) || v > 1e15) return -EINVAL;
  for (int i = 0; i < nunits; i++)
    if (strcmp(end, units[i]) == 0) {
      *value = v * factors[i];
      snprintf(out, outlen, "%s", buf);
      return 0;
    }
  return -EINVAL;
}

int pl_link_parse(const char *s, pl_link_spec *l, char *err, size_t errlen) {
  static const char *const rate_u[] = {"bit", "kbit", "mbit", "gbit"};
  static const double rate_f[] = {1, 1e3, 1e6, 1e9};
  static const char *const delay_u[] = {"us", "ms"};
  static const double delay_f[] = {1e-6, 1e-3};
  static const char *const loss_u[] = {"%"};
  static const double loss_f[] = {1};
  memset(l, 0, sizeof *l);
  const char *p[3] = {s, NULL, NULL};
  size_t n[3] = {0, 0, 0};
  int k = 0;
  for (const char *c = s;; c++) {
    if (*c == ',' || *c == '\0') {
      n[k] = (size_t)(c - p[k]);
      if (*c == '\0') break;
      if (++k == 3) goto bad;
      p[k] = c + 1;
    }
  }
  double v;
  if (number_unit(p[0], n[0], rate_u, rate_f, 4, &v, l->rate, sizeof l->rate) < 0 || v < 8e3)
    goto bad;
  l->bits_per_sec = v;
  if (k >= 1 && (number_unit(p[1], n[1], delay_u, delay_f, 2, &v, l->delay, sizeof l->delay) < 0 ||
                 v > 10))
    goto bad;
  if (k >= 2 && (number_unit(p[2], n[2], loss_u, loss_f, 1, &v, l->loss, sizeof l->loss) < 0 ||
                 v > 100))
    goto bad;
  l->set = 1;
  return 0;
bad:
  snprintf(err, errlen,
           "'%.60s' is not RATE[,DELAY[,LOSS]] (e.g. 100mbit,1ms,0.1%%: a rate of at least "
           "8kbit in bit, kbit, mbit or gbit; a delay up to 10 s in us or ms; a loss in %%)", s);
  return -EINVAL;
}

int pl_link_parse_workers(const char *s, int workers, pl_link_spec *per, char *err,
                          size_t errlen) {
  char buf[1024];
  if (strlen(s) >= sizeof buf) {
    snprintf(err, errlen, "--link-worker: too long");
    return -EINVAL;
  }
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
    char *colon = strchr(t, ':'), *end;
    long i = colon ? strtol(t, &end, 10) : -1;
    if (!colon || end != colon || i < 0 || i >= workers) {
      snprintf(err, errlen, "--link-worker: '%.60s' is not I:RATE[,DELAY[,LOSS]] with I a worker "
               "index below %d (several: separated by ';')", t, workers);
      return -EINVAL;
    }
    char why[256];
    if (pl_link_parse(colon + 1, &per[i], why, sizeof why) < 0) {
      snprintf(err, errlen, "--link-worker: %s", why);
      return -EINVAL;
    }
  }
  return 0;
}

/* ---- running ip and tc ---- */

/* Runs argv (no shell), its stderr's first line into why. Returns its exit status, or -1. */
static int run_cmd(char *const argv[], char *why, size_t whylen) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return -1;
  }
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    dup2(pfd[1], 2);
    execv(argv[0], argv);
    _exit(127);
  }
  close(pfd[1]);
  char buf[512];
  size_t got = 0;
  ssize_t r;
  while ((r = read(pfd[0], buf + got, sizeof buf - 1 - got)) > 0 && got < sizeof buf - 1)
    got += (size_t)r;
  while (r > 0) r = read(pfd[0], (char[256]){0}, 256); /* drain the rest */
  close(pfd[0]);
  buf[got] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  if (why) snprintf(why, whylen, "%s", buf);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The path of an iproute2 program: on PATH, or in /usr/sbin or /sbin (root's PATH may lack
 * them under sudo or a service). 0, or -ENOENT. */
static int find_prog(const char *name, char *out, size_t outlen) {
  const char *path = getenv("PATH");
  char dirs[2048];
  snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin", path ? path : "");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(out, outlen, "%s/%s", d, name);
    if (access(out, X_OK) == 0) return 0;
  }
  return -ENOENT;
}

/* ip or tc with up to 24 arguments; a failure's reason into err. */
#define CMD_MAX 24
static int cmd(const char *prog, char *err, size_t errlen, const char *const *args) {
  char *argv[CMD_MAX + 2];
  int n = 0;
  argv[n++] = (char *)prog;
  for (; args[n - 1] && n <= CMD_MAX; n++) argv[n] = (char *)args[n - 1];
  argv[n] = NULL;
  char why[512];
  int rc = run_cmd(argv, why, sizeof why);
  if (rc == 0) return 0;
  size_t used = (size_t)snprintf(err, errlen, "%s", strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog);
  for (int i = 1; i < n && used < errlen; i++)
    used += (size_t)snprintf(err + used, errlen - used, " %s", argv[i]);
  if (used < errlen) snprintf(err + used, errlen - used, ": %.300s", why[0] ? why : "failed");
  return -1;
}
#define IP(...) cmd(L->ip, err, errlen, (const char *const[]){__VA_ARGS__, NULL})
#define TC(...) cmd(tc, err, errlen, (const char *const[]){__VA_ARGS__, NULL})

/* Deletes the namespaces of launchers that are gone (killed outright, so never cleaned). */
static void sweep(const pl_links *L) {
  DIR *d = opendir("/run/netns");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "pstlink-", 8) != 0) continue;
    long pid = strtol(e->d_name + 8, NULL, 10);
    if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char *argv[] = {(char *)L->ip, "netns", "del", e->d_name, NULL};
    run_cmd(argv, NULL, 0);
  }
  closedir(d);
}

/* The shaping of one direction: egress of dev in namespace ns. A token bucket of the rate
 * (its bucket 10 ms of the rate, at least 64 KiB so that a segmentation-offloaded packet
 * passes, and up to 200 ms queued before drops, as a router's buffer); under netem when there
 * is a delay or a loss. */
static int shape(const pl_links *L, const char *tc, const char *ns, const char *dev,
                 const pl_link_spec *l, char *err, size_t errlen) {
  char burst[32];
  double b = l->bits_per_sec / 8 * 0.01;
  snprintf(burst, sizeof burst, "%.0f", b > 65536 ? b : 65536);
  if (!l->delay[0] && !l->loss[0])
    return TC("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
              l->rate, "burst", burst, "latency", "200ms");
  char delay[40], loss[40];
  snprintf(delay, sizeof delay, "%s", l->delay[0] ? l->delay : "0ms");
  snprintf(loss, sizeof loss, "%s", l->loss[0] ? l->loss : "0%");
  if (TC("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", delay,
         "loss", loss, "limit", "100000") < 0)
    return -1;
  return TC("-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf",
            "rate", l->rate, "burst", burst, "latency", "200ms");
}

int pl_links_up(pl_links *L, int workers, const pl_link_spec *all, const pl_link_spec *per,
                char *err, size_t errlen) {
  memset(L, 0, sizeof *L);
  char tc[256];
  if (geteuid() != 0) {
    snprintf(err, errlen, "--link needs root: it makes network namespaces and shapes their "
             "links with tc (running as uid %d)", (int)geteuid());
    return 2;
  }
  if (find_prog("ip", L->ip, sizeof L->ip) < 0 || find_prog("tc", tc, sizeof tc) < 0) {
    snprintf(err, errlen, "--link needs iproute2's ip and tc, which are not installed "
             "(./pstrain ensure_packages installs them)");
    return 2;
  }
  if (workers > 250) {
    snprintf(err, errlen, "--link: at most 250 workers (one address each in a /24)");
    return 2;
  }
  sweep(L);
  L->workers = workers;
  snprintf(L->ns_ps, sizeof L->ns_ps, "pstlink-%d-ps", (int)getpid());
  char e2[400];
  if (IP("netns", "add", L->ns_ps) < 0) goto fail;
  L->made_ps = 1;
  if (IP("-n", L->ns_ps, "link", "set", "lo", "up") < 0 ||
      IP("-n", L->ns_ps, "link", "add", "name", "br0", "type", "bridge") < 0 ||
      IP("-n", L->ns_ps, "addr", "add", PL_LINK_PS_ADDR "/24", "dev", "br0") < 0 ||
      IP("-n", L->ns_ps, "link", "set", "br0", "up") < 0)
    goto fail;
  for (int i = 0; i < workers; i++) {
    const pl_link_spec *l = per && per[i].set ? &per[i] : all;
    char port[16], addr[32];
    snprintf(L->ns_w[i], sizeof L->ns_w[i], "pstlink-%d-w%d", (int)getpid(), i);
    snprintf(port, sizeof port, "wk%d", i);
    snprintf(addr, sizeof addr, "10.214.0.%d/24", i + 2);
    if (IP("netns", "add", L->ns_w[i]) < 0) goto fail;
    L->made_w = i + 1;
    if (IP("-n", L->ns_w[i], "link", "set", "lo", "up") < 0 ||
        IP("-n", L->ns_ps, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0",
           "netns", L->ns_w[i]) < 0 ||
        IP("-n", L->ns_ps, "link", "set", port, "master", "br0") < 0 ||
        IP("-n", L->ns_ps, "link", "set", port, "up") < 0 ||
        IP("-n", L->ns_w[i], "addr", "add", addr, "dev", "eth0") < 0 ||
        IP("-n", L->ns_w[i], "link", "set", "eth0", "up") < 0)
      goto fail;
    if (l && l->set &&
        (shape(L, tc, L->ns_w[i], "eth0", l, err, errlen) < 0 ||
         shape(L, tc, L->ns_ps, port, l, err, errlen) < 0))
      goto fail;
  }
  L->up = 1;
  return 0;
fail:
  /* What failed is in err; a qdisc the kernel lacks says so plainly. */
  if (strstr(err, "qdisc kind is unknown")) {
    snprintf(e2, sizeof e2, "--link: this kernel has no %s qdisc, so %s cannot be emulated "
             "here (%.200s)", strstr(err, "netem") ? "netem" : "tbf",
             strstr(err, "netem") ? "a delay or a loss" : "a rate", err);
    snprintf(err, errlen, "%s", e2);
  } else {
    snprintf(e2, sizeof e2, "--link: cannot set up the links: %s", err);
    snprintf(err, errlen, "%s", e2);
  }
  pl_links_down(L);
  return 2;
}

void pl_links_down(pl_links *L) {
  if (!L->ip[0]) return;
  for (int i = 0; i < L->made_w; i++) {
    char *argv[] = {L->ip, "netns", "del", L->ns_w[i], NULL};
    run_cmd(argv, NULL, 0);
  }
  if (L->made_ps) {
    char *argv[] = {L->ip, "netns", "del", L->ns_ps, NULL};
    run_cmd(argv, NULL, 0);
  }
  L->made_w = L->made_ps = 0;
  L->up = 0;
}

int pl_links_wrap(const pl_links *L, int worker, char **argv, char **out, int cap) {
  int n = 0;
  while (argv[n]) n++;
  if (n + 5 > cap) return -1;
  out[0] = (char *)L->ip;
  out[1] = "netns";
  out[2] = "exec";
  out[3] = (char *)(worker < 0 ? L->ns_ps : L->ns_w[worker]);
  for (int i = 0; i <= n; i++) out[4 + i] = argv[i];
  return n + 4;
}
