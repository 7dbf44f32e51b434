/* Emulated links (launcher/links/link.h): network namespaces, a bridge, veths and tc. */
#include "launcher/links/link.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/json_file.h"
#include "launcher/common/helpers.h"
#include "launcher/links/place.h"

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
  if (k >= 1) l->delay_s = v;
  if (k >= 2 && (number_unit(p[2], n[2], loss_u, loss_f, 1, &v, l->loss_text,
                             sizeof l->loss_text) < 0 ||
                 v > 100))
    goto bad;
  if (k >= 2) l->loss = v / 100;
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
    char *colon = strchr(t, ':');
    int64_t i = -1;
    if (!colon || pst_parse_int_n(t, (size_t)(colon - t), 0, workers - 1, &i) < 0) {
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

/* Runs argv (no shell) with one of its outputs (fd 1 or 2) read into out[outlen], cut short
 * if longer, and the other to /dev/null. Returns its exit status, or -1. */
static int run_capture(char *const argv[], int fd, char *out, size_t outlen) {
  int pfd[2];
  out[0] = '\0';
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
      dup2(null, fd == 1 ? 2 : 1);
    }
    dup2(pfd[1], fd);
    execv(argv[0], argv);
    _exit(127);
  }
  close(pfd[1]);
  size_t got = 0;
  ssize_t r;
  while ((r = read(pfd[0], out + got, outlen - 1 - got)) > 0 && got < outlen - 1) got += (size_t)r;
  while (r > 0) r = read(pfd[0], (char[256]){0}, 256); /* drain the rest */
  close(pfd[0]);
  out[got] = '\0';
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs argv (no shell), its stderr's first line into why. Returns its exit status, or -1. */
static int run_cmd(char *const argv[], char *why, size_t whylen) {
  char buf[512];
  int rc = run_capture(argv, 2, buf, sizeof buf);
  buf[strcspn(buf, "\n")] = '\0';
  if (why) snprintf(why, whylen, "%s", buf);
  return rc;
}

/* The path of an iproute2 or iptables program: on PATH, or in /usr/sbin or /sbin (root's
 * PATH may lack them under sudo or a service). 0, or -ENOENT. */
static int find_prog(const char *name, char *out, size_t outlen) {
  return pl_find_program(name, "/usr/sbin:/sbin", out, outlen);
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

/* Kills (SIGKILL) every process that lives in namespace ns: those of a launcher that was
 * killed outright, which would otherwise train on in a namespace that no longer has a name,
 * out of reach of the next run's sweep. Returns how many were killed. */
static int kill_netns_pids(const pl_links *L, const char *ns) {
  char out[8192];
  char *argv[] = {(char *)L->ip, "netns", "pids", (char *)ns, NULL};
  if (run_capture(argv, 1, out, sizeof out) != 0) return 0;
  int killed = 0;
  for (char *save = NULL, *t = strtok_r(out, " \n", &save); t; t = strtok_r(NULL, " \n", &save)) {
    int64_t pid;
    if (pst_parse_int(t, 2, INT32_MAX, &pid) == 0 && pid != getpid() &&
        kill((pid_t)pid, SIGKILL) == 0)
      killed++;
  }
  return killed;
}

/* Deletes the namespaces of launchers that are gone (killed outright, so never cleaned),
 * after killing whatever still runs in them. */
static void sweep(const pl_links *L) {
  DIR *d = opendir("/run/netns");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "pstlink-", 8) != 0) continue;
    long pid = strtol(e->d_name + 8, NULL, 10);
    if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    int killed = kill_netns_pids(L, e->d_name);
    if (killed > 0)
      fprintf(stderr, "pstrain: killed %d process%s left in network namespace %s by a launcher "
              "that is gone\n", killed, killed == 1 ? "" : "es", e->d_name);
    char *argv[] = {(char *)L->ip, "netns", "del", e->d_name, NULL};
    run_cmd(argv, NULL, 0);
  }
  closedir(d);
}

/* Whether link l delays or drops (netem's part, or the delay line's). */
static int delays(const pl_link_spec *l) { return l->set && (l->delay[0] || l->loss_text[0]); }

const char *pl_delay_by_name(pl_delay_by d) {
  static const char *const names[] = {"none", "netem", "delay line"};
  return (unsigned)d < sizeof names / sizeof *names ? names[d] : "?";
}

/* The shaping of one direction: egress of dev in namespace ns. A token bucket of the rate
 * (its bucket 1 ms of the rate, at least 128 KiB, and up to 200 ms queued before drops, as a
 * router's buffer); under netem when netem delays or drops (with_netem). The bucket is what
 * a link passes at once after an idle spell, faster than its rate: it was 10 ms of the rate
 * (1.25 MB at 1 Gbit/s) until issue 39 found that a whole mlp push (0.94 MB) went through in
 * one burst after each step's compute, so that a link's time per step fell far below its
 * bytes at its rate (docs/benchmarks.md, "Where the ps sits"); the kernel's tbf times its
 * bucket with high resolution timers, so 1 ms of the rate keeps the rate. The floor must
 * hold a whole segmentation-offloaded packet, 64 KiB of payload and its headers: with a
 * 64 KiB floor such packets were split and 5% of the bytes at 200 Mbit/s were resent
 * (tests/placement_test.sh's jobs: 0.991 MB a step against 0.947 with 128 KiB). */
static int shape(const pl_links *L, const char *tc, const char *ns, const char *dev,
                 const pl_link_spec *l, int with_netem, char *err, size_t errlen) {
  char burst[32];
  double b = l->bits_per_sec / 8 * 0.001;
  snprintf(burst, sizeof burst, "%.0f", b > 131072 ? b : 131072);
  if (!with_netem || !delays(l))
    return TC("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
              l->rate, "burst", burst, "latency", "200ms");
  char delay[40], loss[40];
  snprintf(delay, sizeof delay, "%s", l->delay[0] ? l->delay : "0ms");
  snprintf(loss, sizeof loss, "%s", l->loss_text[0] ? l->loss_text : "0%");
  if (TC("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", delay,
         "loss", loss, "limit", "100000") < 0)
    return -1;
  return TC("-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf",
            "rate", l->rate, "burst", burst, "latency", "200ms");
}

/* Whether this kernel has netem: a netem qdisc on the ps's namespace's loopback, removed
 * again. 1, 0 (the kernel says it knows no such qdisc), or -1 with the reason in err. */
static int have_netem(const pl_links *L, const char *tc, char *err, size_t errlen) {
  if (TC("-n", L->ns_ps, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") == 0)
    return TC("-n", L->ns_ps, "qdisc", "del", "dev", "lo", "root") == 0 ? 1 : -1;
  return strstr(err, "qdisc kind is unknown") ? 0 : -1;
}

static int tcp_socket(void *arg) {
  (void)arg;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return s < 0 ? -errno : s;
}

/* The path of namespace ns, as setns and the delay line take it. */
static const char *ns_path(const char *ns, char *buf, size_t len) {
  snprintf(buf, len, "/run/netns/%s", ns);
  return buf;
}

/* A TCP socket made in namespace ns, or a negative error code. */
static int socket_in(const char *ns) {
  char path[96];
  return pl_in_netns(ns_path(ns, path, sizeof path), tcp_socket, NULL);
}

/* The delay line: iptables sends each packet of a delayed link to a netfilter queue where
 * it arrives (delayline.h says why there): what node i sends the hub, to queue i in the
 * hub's namespace (INPUT from its address); what the hub sends node i, to queue 0 in its own
 * (INPUT from the hub's). Either way the packet has passed the link's rate first: a constant
 * delay and a FIFO rate commute. Where nodes talk to each other (peers), what node i sends
 * node j crosses both links: queue 1+i in j's namespace holds it for both delays, and drops
 * what either link would. */
static int delay_line_up(pl_links *L, char *err, size_t errlen) {
  char iptables[256];
  if (find_prog("iptables", iptables, sizeof iptables) < 0) {
    snprintf(err, errlen, "this kernel has no netem, and the delay line that stands in for it "
             "needs iptables, which is not installed (./pstrain installs it)");
    return -1;
  }
  int cap = 2 * L->nodes + (L->peers ? L->nodes * L->nodes : 0), n = 0, rc = -1;
  pl_delay_spec *spec = calloc((size_t)cap, sizeof *spec);
  char(*paths)[64] = calloc((size_t)cap, sizeof *paths);
  if (!spec || !paths) {
    snprintf(err, errlen, "the delay line: out of memory");
    goto out;
  }
  for (int i = 0; i < L->nodes; i++) {
    const pl_link_spec *l = &L->spec[i];
    char addr[32], queue[16];
    pl_place_addr(i, addr, sizeof addr);
    if (delays(l)) {
      snprintf(queue, sizeof queue, "%d", i);
      if (IP("netns", "exec", L->ns_ps, iptables, "-w", "-A", "INPUT", "-s", addr, "-j",
             "NFQUEUE", "--queue-num", queue) < 0 ||
          IP("netns", "exec", L->ns_w[i], iptables, "-w", "-A", "INPUT", "-s", PL_LINK_PS_ADDR,
             "-j", "NFQUEUE", "--queue-num", "0") < 0)
        goto out;
      spec[n] = (pl_delay_spec){ns_path(L->ns_ps, paths[n], sizeof paths[n]), i, l->delay_s, l->loss};
      n++;
      spec[n] = (pl_delay_spec){ns_path(L->ns_w[i], paths[n], sizeof paths[n]), 0, l->delay_s,
                                l->loss};
      n++;
    }
    for (int j = 0; L->peers && j < L->nodes; j++) {
      const pl_link_spec *m = &L->spec[j];
      if (j == i || !(delays(l) || delays(m))) continue;
      snprintf(queue, sizeof queue, "%d", 1 + i);
      if (IP("netns", "exec", L->ns_w[j], iptables, "-w", "-A", "INPUT", "-s", addr, "-j",
             "NFQUEUE", "--queue-num", queue) < 0)
        goto out;
      spec[n] = (pl_delay_spec){ns_path(L->ns_w[j], paths[n], sizeof paths[n]), 1 + i,
                                l->delay_s + m->delay_s, 1 - (1 - l->loss) * (1 - m->loss)};
      n++;
    }
  }
  char why[300];
  if (pl_delayline_start(&L->dl, n, spec, why, sizeof why) < 0) {
    snprintf(err, errlen, "the delay line (this kernel has no netem): %s", why);
    goto out;
  }
  rc = 0;
out:
  free(spec);
  free(paths);
  return rc;
}

/* Node i's round trip to the hub as TCP sees it: the best of three handshakes (SYN there,
 * SYN-ACK back) from its namespace to a listener in the hub's. -1 when none completed in
 * time (a link that loses much). */
static double probe_rtt(const pl_links *L, int i) {
  int ls = socket_in(L->ns_ps);
  struct sockaddr_in a = {.sin_family = AF_INET};
  inet_pton(AF_INET, PL_LINK_PS_ADDR, &a.sin_addr);
  socklen_t len = sizeof a;
  double best = -1;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4) < 0 ||
      getsockname(ls, (struct sockaddr *)&a, &len) < 0)
    goto out;
  int wait_ms = (int)(4000 * L->spec[i].delay_s) + 3000;
  for (int k = 0; k < 3; k++) {
    int c = socket_in(L->ns_w[i]);
    if (c < 0) break;
    double t0 = pst_now();
    int rc = connect(c, (struct sockaddr *)&a, sizeof a);
    struct pollfd p = {.fd = c, .events = POLLOUT};
    int e = 0;
    socklen_t el = sizeof e;
    if ((rc == 0 || (errno == EINPROGRESS && poll(&p, 1, wait_ms) == 1)) &&
        getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0) {
      double t = pst_now() - t0;
      if (best < 0 || t < best) best = t;
    }
    close(c);
    int acc; /* the handshakes completed wait in the backlog: take them */
    while ((acc = accept4(ls, NULL, NULL, SOCK_CLOEXEC)) >= 0) close(acc);
  }
out:
  if (ls >= 0) close(ls);
  return best;
}

int pl_links_up(pl_links *L, int workers, int extra, int peers, const pl_link_spec *all,
                const pl_link_spec *per, char *err, size_t errlen) {
  memset(L, 0, sizeof *L);
  L->busiest = -1;
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
  if (workers + extra > PL_MAX_NODES || extra < 0 || (extra > 0 && !all)) {
    snprintf(err, errlen, "--link: at most %d workers and separate shards together (one "
             "address each in a /24), each shard behind --link's link", PL_MAX_NODES);
    return 2;
  }
  sweep(L);
  L->workers = workers;
  L->nodes = workers + extra;
  L->peers = peers;
  int delayed = 0;
  for (int i = 0; i < L->nodes; i++) {
    const pl_link_spec *l = i < workers && per && per[i].set ? &per[i] : all;
    if (l) L->spec[i] = *l;
    delayed |= delays(&L->spec[i]);
    L->sent[i] = L->received[i] = -1;
  }
  snprintf(L->ns_ps, sizeof L->ns_ps, "pstlink-%d-ps", (int)getpid());
  char e2[400];
  if (IP("netns", "add", L->ns_ps) < 0) goto fail;
  L->made_ps = 1;
  if (IP("-n", L->ns_ps, "link", "set", "lo", "up") < 0 ||
      IP("-n", L->ns_ps, "link", "add", "name", "br0", "type", "bridge") < 0 ||
      IP("-n", L->ns_ps, "addr", "add", PL_LINK_PS_ADDR "/24", "dev", "br0") < 0 ||
      IP("-n", L->ns_ps, "link", "set", "br0", "up") < 0)
    goto fail;
  if (delayed) {
    int netem = have_netem(L, tc, err, errlen);
    if (netem < 0) goto fail;
    L->delay_by = netem ? PL_DELAY_NETEM : PL_DELAY_LINE;
  }
  for (int i = 0; i < L->nodes; i++) {
    const pl_link_spec *l = &L->spec[i];
    char addr[32], cidr[40];
    int w = i < workers;
    snprintf(L->ns_w[i], sizeof L->ns_w[i], "pstlink-%d-%c%d", (int)getpid(), w ? 'w' : 's',
             w ? i : i - workers);
    snprintf(L->port[i], sizeof L->port[i], "%s%d", w ? "wk" : "ps", w ? i : i - workers);
    pl_place_addr(i, addr, sizeof addr);
    snprintf(cidr, sizeof cidr, "%s/24", addr);
    const char *port = L->port[i];
    if (IP("netns", "add", L->ns_w[i]) < 0) goto fail;
    L->made_w = i + 1;
    if (IP("-n", L->ns_w[i], "link", "set", "lo", "up") < 0 ||
        IP("-n", L->ns_ps, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0",
           "netns", L->ns_w[i]) < 0 ||
        IP("-n", L->ns_ps, "link", "set", port, "master", "br0") < 0 ||
        IP("-n", L->ns_ps, "link", "set", port, "up") < 0 ||
        IP("-n", L->ns_w[i], "addr", "add", cidr, "dev", "eth0") < 0 ||
        IP("-n", L->ns_w[i], "link", "set", "eth0", "up") < 0)
      goto fail;
    int with_netem = L->delay_by == PL_DELAY_NETEM;
    if (l->set && (shape(L, tc, L->ns_w[i], "eth0", l, with_netem, err, errlen) < 0 ||
                   shape(L, tc, L->ns_ps, port, l, with_netem, err, errlen) < 0))
      goto fail;
  }
  if (L->delay_by == PL_DELAY_LINE && delay_line_up(L, err, errlen) < 0)
    goto fail;
  for (int i = 0; i < L->nodes; i++) L->rtt_s[i] = probe_rtt(L, i);
  L->up = 1;
  return 0;
fail:
  /* What failed is in err; a qdisc the kernel lacks says so plainly. */
  if (strstr(err, "qdisc kind is unknown")) {
    snprintf(e2, sizeof e2, "--link: this kernel has no tbf qdisc, so a rate cannot be emulated "
             "here (%.200s)", err);
    snprintf(err, errlen, "%s", e2);
  } else {
    snprintf(e2, sizeof e2, "--link: cannot set up the links: %s", err);
    snprintf(err, errlen, "%s", e2);
  }
  pl_links_down(L, NULL, NULL);
  return 2;
}

void pl_links_describe(const pl_links *L, char *out, size_t outlen) {
  size_t used = 0;
  double lo = -1, hi = -1;
  for (int i = 0; i < L->nodes; i++) {
    double r = L->rtt_s[i];
    if (r < 0) continue;
    if (lo < 0 || r < lo) lo = r;
    if (r > hi) hi = r;
  }
  int extra = L->nodes - L->workers;
  used += (size_t)snprintf(out + used, outlen - used, "links: %d worker%s", L->workers,
                           L->workers == 1 ? "" : "s");
  if (extra > 0 && used < outlen)
    used += (size_t)snprintf(out + used, outlen - used, " and %d ps shard%s", extra,
                             extra == 1 ? "" : "s");
  if (L->delay_by != PL_DELAY_NONE && used < outlen)
    used += (size_t)snprintf(out + used, outlen - used, ", delays and losses by %s%s",
                             pl_delay_by_name(L->delay_by),
                             L->delay_by == PL_DELAY_LINE ? " (no netem here)" : "");
  if (used < outlen) {
    if (lo < 0) snprintf(out + used, outlen - used, "; no round trip measured");
    else if (hi - lo < 5e-5) snprintf(out + used, outlen - used, "; round trip %.2f ms", lo * 1e3);
    else snprintf(out + used, outlen - used, "; round trips %.2f to %.2f ms", lo * 1e3, hi * 1e3);
  }
}

/* /proc/net/dev of the calling thread's namespace, read into the buffer arg points to. */
typedef struct {
  char buf[32768];
  size_t len;
} dev_text;
static int read_net_dev(void *arg) {
  dev_text *t = arg;
  FILE *f = fopen("/proc/thread-self/net/dev", "r");
  if (!f) return -errno;
  t->len = fread(t->buf, 1, sizeof t->buf - 1, f);
  t->buf[t->len] = '\0';
  fclose(f);
  return 0;
}

int pl_links_count(pl_links *L) {
  if (!L->up) return -ENOENT;
  static dev_text t;
  char path[96];
  int rc = pl_in_netns(ns_path(L->ns_ps, path, sizeof path), read_net_dev, &t);
  if (rc < 0) return rc;
  L->busiest = -1;
  L->busiest_bytes = 0;
  for (int i = 0; i < L->nodes; i++) {
    /* "  wk0: RXBYTES RXPACKETS ... (8 fields) TXBYTES ...": the hub's end receives what the
     * node sends. */
    char key[24];
    snprintf(key, sizeof key, "%s:", L->port[i]);
    const char *p = strstr(t.buf, key);
    unsigned long long v[9];
    if (!p || sscanf(p + strlen(key), "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                     &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) != 9)
      continue;
    L->sent[i] = (double)v[0];
    L->received[i] = (double)v[8];
    double most = L->sent[i] > L->received[i] ? L->sent[i] : L->received[i];
    if (most > L->busiest_bytes) {
      L->busiest_bytes = most;
      L->busiest = i;
    }
  }
  return 0;
}

/* A node's name for people: "worker 2", "ps shard 1". */
static void node_name(const pl_links *L, int i, char *out, size_t outlen) {
  if (i < L->workers) snprintf(out, outlen, "worker %d", i);
  else snprintf(out, outlen, "ps shard %d", i - L->workers);
}

/* One node's link for links.json. */
static cJSON *node_json(const pl_links *L, int i) {
  const pl_link_spec *l = &L->spec[i];
  cJSON *w = cJSON_CreateObject();
  cJSON_AddNumberToObject(w, i < L->workers ? "worker" : "shard", i < L->workers ? i : i - L->workers);
  cJSON_AddStringToObject(w, "namespace", L->ns_w[i]);
  cJSON_AddNumberToObject(w, "rate_bits_per_sec", l->set ? l->bits_per_sec : 0);
  cJSON_AddNumberToObject(w, "delay_ms", l->set ? l->delay_s * 1e3 : 0);
  cJSON_AddNumberToObject(w, "loss", l->set ? l->loss : 0);
  if (L->rtt_s[i] >= 0) cJSON_AddNumberToObject(w, "round_trip_ms", L->rtt_s[i] * 1e3);
  else cJSON_AddNullToObject(w, "round_trip_ms");
  if (L->sent[i] >= 0) {
    cJSON_AddNumberToObject(w, "bytes_sent", L->sent[i]);
    cJSON_AddNumberToObject(w, "bytes_received", L->received[i]);
  }
  return w;
}

/* run_dir/links.json: the links as asked, as measured, the bytes they carried beside the
 * model's, and the delay line's figures. */
static void write_report(const pl_links *L, const char *run_dir, const pl_delayline_stats *st,
                         const pl_links_note *note) {
  cJSON *doc = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(doc, "workers");
  cJSON_AddStringToObject(doc, "delay_by", pl_delay_by_name(L->delay_by));
  if (note && note->placement) cJSON_AddStringToObject(doc, "placement", note->placement);
  for (int i = 0; i < L->workers; i++) cJSON_AddItemToArray(arr, node_json(L, i));
  if (L->nodes > L->workers) {
    cJSON *sh = cJSON_AddArrayToObject(doc, "ps_shards");
    for (int i = L->workers; i < L->nodes; i++) cJSON_AddItemToArray(sh, node_json(L, i));
  }
  if (L->busiest >= 0) {
    char name[32];
    node_name(L, L->busiest, name, sizeof name);
    cJSON *b = cJSON_AddObjectToObject(doc, "busiest_link");
    cJSON_AddStringToObject(b, "node", name);
    cJSON_AddStringToObject(b, "port", L->port[L->busiest]);
    cJSON_AddNumberToObject(b, "bytes", L->busiest_bytes);
    if (note && note->steps > 0) {
      cJSON_AddNumberToObject(b, "steps", note->steps);
      cJSON_AddNumberToObject(b, "bytes_per_step", L->busiest_bytes / note->steps);
    }
    if (note && note->model_bytes > 0) {
      cJSON_AddNumberToObject(b, "model_bytes_per_step", note->model_bytes);
      cJSON_AddStringToObject(b, "model_formula", note->formula ? note->formula : "");
    }
    if (note && note->step_seconds > 0) cJSON_AddNumberToObject(b, "step_seconds", note->step_seconds);
    if (note && note->model_seconds > 0) {
      /* Communication only: the compute term is measured by pstrain compare (--compute-link)
       * on a run of the same job behind fast links, and added there. */
      cJSON_AddNumberToObject(b, "model_comm_seconds", note->model_seconds);
      cJSON_AddNumberToObject(b, "model_transfer_seconds", note->model_transfer_seconds);
      cJSON_AddNumberToObject(b, "model_latency_seconds", note->model_latency_seconds);
      cJSON_AddNumberToObject(b, "model_hops", note->model_hops);
    }
  }
  if (st) {
    cJSON *d = cJSON_AddObjectToObject(doc, "delay_line");
    cJSON_AddNumberToObject(d, "packets", (double)st->packets);
    cJSON_AddNumberToObject(d, "dropped", (double)st->dropped);
    cJSON_AddNumberToObject(d, "late_mean_ms", st->late_mean_s * 1e3);
    cJSON_AddNumberToObject(d, "late_p50_ms", st->late_p50_s * 1e3);
    cJSON_AddNumberToObject(d, "late_p90_ms", st->late_p90_s * 1e3);
    cJSON_AddNumberToObject(d, "late_max_ms", st->late_max_s * 1e3);
    cJSON_AddBoolToObject(d, "realtime", st->realtime);
    cJSON_AddNumberToObject(d, "cpu_share", st->cpu_share);
    cJSON_AddNumberToObject(d, "host_steal_share", st->steal_share);
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/links.json", run_dir);
  int rc = pst_json_write_file(path, doc, 1);
  if (rc < 0) fprintf(stderr, "pstrain: cannot write %s: %s\n", path, strerror(-rc));
  cJSON_Delete(doc);
}

void pl_links_down(pl_links *L, const char *run_dir, const pl_links_note *note) {
  if (!L->ip[0]) return;
  /* The counters go with the veths: read them first (a run that read them already, to
   * print its figures, keeps those). */
  if (L->up && L->busiest < 0) pl_links_count(L);
  pl_delayline_stats st;
  int had_line = L->dl != NULL;
  pl_delayline_stop(L->dl, &st);
  L->dl = NULL;
  if (run_dir && L->up) write_report(L, run_dir, had_line ? &st : NULL, note);
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

int pl_links_wrap(const pl_links *L, int node, char **argv, char **out, int cap) {
  int n = 0;
  while (argv[n]) n++;
  if (n + 5 > cap) return -1;
  out[0] = (char *)L->ip;
  out[1] = "netns";
  out[2] = "exec";
  out[3] = (char *)(node < 0 ? L->ns_ps : L->ns_w[node]);
  for (int i = 0; i <= n; i++) out[4 + i] = argv[i];
  return n + 4;
}

void pl_links_worker_prefix(const pl_links *L, char *out, size_t outlen) {
  snprintf(out, outlen, "pstlink-%d-w", (int)getpid());
  (void)L;
}
