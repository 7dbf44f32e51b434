/* The delay line (launcher/links/delayline.h) on real packets, in a network namespace of this
 * test's own (unshare): iptables sends loopback packets to and from 127.0.0.2 to queue 0
 * and those to 127.0.0.3 to queue 1, where they arrive (the INPUT hook, as launcher/links/link.c
 * does: see delayline.h).
 *  1. UDP through a 20 ms line: no datagram arrives sooner than 20 ms after it was sent,
 *     they arrive in the order sent, and the median is within 5 ms of 20;
 *  2. UDP through a line that drops 30%: what arrives is within 6 standard deviations of
 *     70% of 2000, and the line's count of drops is what did not arrive;
 *  3. TCP both ways through the 20 ms line: the handshake takes at least the 40 ms round
 *     trip, and 8 MB (segmentation-offloaded packets) arrive intact;
 *  4. stopping with packets held lets them through, at once;
 *  5. a namespace that does not exist: an error with a reason, no thread.
 * Needs root and iptables (the netfilter queue rules); without them it says why and passes
 * as skipped. Exits non-zero on any mismatch. */
#include "launcher/links/delayline.h"

#include "common/check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int skip(const char *why) {
  printf("SKIP: %s\n", why);
  return 0;
}

static struct sockaddr_in addr_of(const char *ip, int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

static int bound_socket(int type, const char *ip, int *port) {
  int s = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = addr_of(ip, 0);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) < 0) {
    perror("bind");
    exit(1);
  }
  *port = ntohs(a.sin_port);
  /* Room for every datagram of a run, so that none is lost to a full buffer. */
  int size = 8 << 20;
  if (type == SOCK_DGRAM) setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
  return s;
}

typedef struct {
  uint32_t seq;
  double sent;
} probe;

/* Sends n datagrams to ip, gap seconds apart; returns how many arrived (within wait_s of
 * the last), their one-way times into lat[] in arrival order, and whether the order held. */
static int udp_run(const char *ip, int n, double gap, double wait_s, double *lat, int *in_order) {
  int port, rport;
  int rx = bound_socket(SOCK_DGRAM, ip, &rport);
  int tx = bound_socket(SOCK_DGRAM, "127.0.0.1", &port);
  struct sockaddr_in to = addr_of(ip, rport);
  int got = 0;
  uint32_t last = 0;
  *in_order = 1;
  double end = 0;
  for (int i = 0; i < n || now_s() < end; ) {
    if (i < n) {
      probe p = {(uint32_t)i + 1, now_s()};
      if (sendto(tx, &p, sizeof p, 0, (struct sockaddr *)&to, sizeof to) != sizeof p) {
        perror("sendto");
        exit(1);
      }
      if (++i == n) end = now_s() + wait_s;
    }
    struct pollfd pf = {.fd = rx, .events = POLLIN};
    while (poll(&pf, 1, i < n ? (int)(gap * 1000) : 5) > 0) {
      probe p;
      if (recv(rx, &p, sizeof p, 0) != sizeof p) break;
      if (p.seq <= last) *in_order = 0;
      last = p.seq;
      lat[got++] = now_s() - p.sent;
      if (i < n) break;
    }
  }
  close(rx);
  close(tx);
  return got;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int sh(const char *cmd) {
  int rc = system(cmd);
  return rc == 0 ? 0 : -1;
}

int main(void) {
  if (geteuid() != 0) return skip("the netfilter queue needs root");
  if (sh("command -v iptables >/dev/null 2>&1") < 0) return skip("no iptables");
  if (unshare(CLONE_NEWNET) < 0) {
    char why[128];
    snprintf(why, sizeof why, "cannot make a network namespace: %s", strerror(errno));
    return skip(why);
  }
  /* The new namespace's loopback is down. */
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) {
    perror("lo up");
    return 1;
  }
  close(s);
  if (sh("iptables -A INPUT -d 127.0.0.2 -j NFQUEUE --queue-num 0 && "
         "iptables -A INPUT -s 127.0.0.2 -j NFQUEUE --queue-num 0 && "
         "iptables -A INPUT -d 127.0.0.3 -j NFQUEUE --queue-num 1") < 0)
    return skip("iptables cannot add NFQUEUE rules here");

  /* 5. first: nothing is started for a namespace that is not there. */
  pl_delayline *d = NULL;
  char err[256] = "";
  pl_delay_spec bad = {"/run/netns/pstrain-no-such-namespace", 0, 0.020, 0};
  int rc = pl_delayline_start(&d, 1, &bad, err, sizeof err);
  CHECKF(rc < 0 && d == NULL && strstr(err, "no-such-namespace"), "bad namespace: rc %d, '%s'",
        rc, err);

  pl_delay_spec spec[2] = {{NULL, 0, 0.020, 0}, {NULL, 1, 0, 0.30}};
  rc = pl_delayline_start(&d, 2, spec, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "FAIL: pl_delayline_start: %s\n", err);
    return 1;
  }

  /* 1. 20 ms one way. */
  static double lat[4000];
  int order;
  int got = udp_run("127.0.0.2", 200, 0.001, 0.2, lat, &order);
  CHECKF(got == 200, "delay: %d of 200 datagrams arrived", got);
  CHECKF(order, "delay: datagrams arrived out of order");
  double min = 1e9;
  for (int i = 0; i < got; i++) min = lat[i] < min ? lat[i] : min;
  qsort(lat, (size_t)got, sizeof *lat, cmp_double);
  double med = got ? lat[got / 2] : 0;
  CHECKF(min >= 0.020, "delay: a datagram arrived after %.2f ms, sooner than 20", min * 1e3);
  CHECKF(med <= 0.025, "delay: median %.2f ms, more than 5 ms over 20", med * 1e3);
  printf("1. 20 ms line: %d datagrams in order, one way %.2f ms min, %.2f median, %.2f max\n",
         got, min * 1e3, med * 1e3, got ? lat[got - 1] * 1e3 : 0);

  /* 2. 30% loss, counted by the line too. */
  pl_delayline_stats st0;
  pl_delayline_stop(d, &st0);
  rc = pl_delayline_start(&d, 2, spec, err, sizeof err);
  CHECKF(rc == 0, "restart: %s", err);
  got = udp_run("127.0.0.3", 2000, 0.0002, 0.2, lat, &order);
  pl_delayline_stats st;
  pl_delayline_stop(d, &st);
  double sd = 20.49; /* sqrt(2000 * 0.3 * 0.7) */
  CHECKF(got >= 1400 - 6 * sd && got <= 1400 + 6 * sd, "loss: %d of 2000 arrived, not 1400 +- 123",
        got);
  CHECKF(st.packets == 2000 && st.dropped == (uint64_t)(2000 - got),
        "loss: the line saw %llu and dropped %llu; %d arrived", (unsigned long long)st.packets,
        (unsigned long long)st.dropped, got);
  CHECKF(order, "loss: datagrams arrived out of order");
  printf("2. 30%% loss: %d of 2000 arrived, the line dropped %llu\n", got,
         (unsigned long long)st.dropped);

  /* 3. TCP: the handshake's round trip, then 8 MB both ways through the line. */
  rc = pl_delayline_start(&d, 2, spec, err, sizeof err);
  CHECKF(rc == 0, "restart: %s", err);
  int lport;
  int ls = bound_socket(SOCK_STREAM, "127.0.0.2", &lport);
  listen(ls, 1);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in to = addr_of("127.0.0.2", lport);
  double t0 = now_s();
  CHECKF(connect(c, (struct sockaddr *)&to, sizeof to) == 0, "connect: %s", strerror(errno));
  double rtt = now_s() - t0;
  CHECKF(rtt >= 0.040 && rtt < 0.060, "TCP handshake took %.2f ms, not 40 to 60", rtt * 1e3);
  int a = accept(ls, NULL, NULL);
  enum { BYTES = 8 << 20 };
  static unsigned char tx[BYTES], rx[BYTES];
  for (size_t i = 0; i < BYTES; i++) tx[i] = (unsigned char)(i * 2654435761u >> 13);
  size_t sent = 0, recvd = 0;
  fcntl(c, F_SETFL, O_NONBLOCK);
  t0 = now_s();
  while (recvd < BYTES && now_s() - t0 < 30) {
    struct pollfd pf[2] = {{.fd = c, .events = sent < BYTES ? POLLOUT : 0},
                           {.fd = a, .events = POLLIN}};
    poll(pf, 2, 1000);
    if (pf[0].revents & POLLOUT) {
      ssize_t w = send(c, tx + sent, BYTES - sent, MSG_NOSIGNAL);
      if (w > 0) sent += (size_t)w;
    }
    if (pf[1].revents & POLLIN) {
      ssize_t r = recv(a, rx + recvd, BYTES - recvd, 0);
      if (r > 0) recvd += (size_t)r;
    }
  }
  double took = now_s() - t0;
  CHECKF(recvd == BYTES && memcmp(tx, rx, BYTES) == 0, "TCP: %zu of %d bytes, intact: %d",
        recvd, BYTES, recvd == BYTES && memcmp(tx, rx, BYTES) == 0);
  printf("3. TCP through the 20 ms line: handshake %.2f ms, 8 MB in %.2f s\n", rtt * 1e3, took);

  /* 4. A stop with packets held lets them through now, not 20 ms on. */
  int port2;
  int rx2 = bound_socket(SOCK_DGRAM, "127.0.0.2", &port2);
  int tx2 = bound_socket(SOCK_DGRAM, "127.0.0.1", &lport);
  struct sockaddr_in to2 = addr_of("127.0.0.2", port2);
  for (int i = 0; i < 10; i++) sendto(tx2, "x", 1, 0, (struct sockaddr *)&to2, sizeof to2);
  usleep(2000);
  t0 = now_s();
  pl_delayline_stop(d, &st);
  int arrived = 0;
  struct pollfd pf = {.fd = rx2, .events = POLLIN};
  char ch;
  while (poll(&pf, 1, 5) > 0 && recv(rx2, &ch, 1, 0) == 1) arrived++;
  double stop_took = now_s() - t0;
  CHECKF(arrived == 10 && stop_took < 0.015, "stop: %d of 10 held datagrams in %.2f ms", arrived,
        stop_took * 1e3);
  /* The quantiles come from buckets 2% wide, each standing for its middle; under 1 us is 1 us. */
  CHECKF(st.late_p50_s > 0 && st.late_p50_s <= st.late_p90_s &&
         st.late_p90_s <= st.late_max_s * 1.02 + 1e-6,
         "lateness quantiles p50 %.3f, p90 %.3f, max %.3f ms", st.late_p50_s * 1e3,
         st.late_p90_s * 1e3, st.late_max_s * 1e3);
  /* The line's share of a core while it held a few datagrams a time, and the host's steal. */
  CHECKF(st.cpu_share > 0 && st.cpu_share < 0.5 && st.steal_share >= 0 && st.steal_share <= 1,
         "the line's share of a core %.3f, the host's steal %.3f", st.cpu_share, st.steal_share);
  printf("4. stop with 10 datagrams held: all through in %.2f ms; verdicts %.3f ms late on "
         "average, %.3f at the median, %.3f at the 90th percentile, %.3f at most; the line "
         "used %.1f%% of a core, the host took %.2f%% of the CPU time\n",
         stop_took * 1e3, st.late_mean_s * 1e3, st.late_p50_s * 1e3, st.late_p90_s * 1e3,
         st.late_max_s * 1e3, 100 * st.cpu_share, 100 * st.steal_share);
  close(rx2);
  close(tx2);
  close(a);
  close(c);
  close(ls);

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
