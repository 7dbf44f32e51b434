/* The delay line (launcher/links/delayline.h): netfilter queues served by one thread. */
#include "launcher/links/delayline.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/prom.h"

/* Packets a queue holds at most: the kernel's queue is as long, so the ring cannot
 * overflow (the kernel drops a packet past it). 4096 full-size frames are 6 MB, 20 ms of a
 * 2.5 Gbit/s link; segmentation-offloaded packets carry up to 64 KiB each. */
#define QUEUE_CAP 4096u
/* Each queue socket's receive buffer (a limit, not an allocation): room for its notices
 * while the thread sleeps. */
#define RCVBUF (16 << 20)

typedef struct {
  uint32_t id;
  int64_t due_ns; /* CLOCK_MONOTONIC */
} held;

typedef struct {
  struct pl_delayline *line;
  struct nfq_handle *h; /* a netfilter socket per queue: a socket belongs to one namespace */
  struct nfq_q_handle *qh;
  int fd;
  int64_t delay_ns;
  uint64_t drop_below; /* a packet whose random draw is below this is dropped */
  held *ring;          /* [QUEUE_CAP], oldest at head */
  uint32_t head, count;
} dl_queue;

struct pl_delayline {
  int wake; /* an eventfd that says stop */
  int n;
  dl_queue *q;
  struct pollfd *pfd; /* [n + 1]: the queues' sockets, then wake */
  pthread_t thread;
  int running;
  uint64_t rng;
  pl_delayline_stats st;
  uint64_t released; /* let through on time (not at the stop) */
  double late_sum_s;
  /* How late each of those came: the quantiles tell a line that falls behind its links'
   * rate (most verdicts late) from one whose core was taken away for a while (a few late by
   * the same milliseconds). A VM's vCPU stalls so: a real-time thread on the 2-core CI VM
   * woke up to 11 ms late a few times a minute with nothing else running, which moved a
   * job's mean by up to a millisecond (docs/benchmarks.md, "The delay line's lateness"). */
  pst_quant late;
  /* Why verdicts came late, for whoever judges them: the line's thread's own CPU time over
   * its life (a line that falls behind is busy), and the machine's steal time over the same
   * while (a host that takes the vCPUs away; /proc/stat). */
  int64_t started_ns;
  double thread_cpu_s;
  uint64_t steal0, total0;
};

/* The machine's steal and total CPU time so far, in the kernel's ticks (/proc/stat's first
 * line); 0 and 0 where it cannot be read. */
static void stat_ticks(uint64_t *steal, uint64_t *total) {
  *steal = *total = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return;
  unsigned long long v[8] = {0};
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
             &v[4], &v[5], &v[6], &v[7]) == 8) {
    for (int i = 0; i < 8; i++) *total += v[i];
    *steal = v[7];
  }
  fclose(f);
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* xorshift64*: loss needs uniform draws, not a cryptographic source. */
static uint64_t next_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static void verdict(dl_queue *q, uint32_t id, int v) {
  /* A verdict that cannot be sent leaves the packet with the kernel until the queue closes
   * (it then drops it): there is nothing better to do with it here. */
  (void)nfq_set_verdict(q->qh, id, (uint32_t)v, 0, NULL);
}

/* A packet reached queue q: dropped at once, or held until its time. */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data) {
  (void)qh;
  (void)msg;
  dl_queue *q = data;
  pl_delayline *d = q->line;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  d->st.packets++;
  if (q->drop_below && next_rand(&d->rng) < q->drop_below) {
    d->st.dropped++;
    verdict(q, id, NF_DROP);
    return 0;
  }
  if (q->count == QUEUE_CAP) { /* cannot happen while the kernel's queue is as long */
    verdict(q, id, NF_ACCEPT);
    return 0;
  }
  q->ring[(q->head + q->count) % QUEUE_CAP] = (held){id, now_ns() + q->delay_ns};
  q->count++;
  return 0;
}

/* Lets through every held packet whose time has come (all of them when all is set); returns
 * the next one's time, or INT64_MAX when none is held. */
static int64_t release(pl_delayline *d, int all) {
  int64_t next = INT64_MAX, now = now_ns();
  for (int i = 0; i < d->n; i++) {
    dl_queue *q = &d->q[i];
    while (q->count) {
      held *p = &q->ring[q->head];
      if (!all && p->due_ns > now) {
        if (p->due_ns < next) next = p->due_ns;
        break;
      }
      double late = (double)(now - p->due_ns) * 1e-9;
      if (!all) {
        d->released++;
        d->late_sum_s += late > 0 ? late : 0;
        pst_quant_observe(&d->late, late > 0 ? late : 0);
        if (late > d->st.late_max_s) d->st.late_max_s = late;
      }
      verdict(q, p->id, NF_ACCEPT);
      q->head = (q->head + 1) % QUEUE_CAP;
      q->count--;
    }
  }
  return next;
}

static void *serve(void *arg) {
  pl_delayline *d = arg;
  /* The default 50 us of timer slack would be added to most waits. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  /* A link does not wait for a core: at a real-time priority the thread runs as soon as a
   * held packet is due, ahead of the workers' and the ps's compute, where at an ordinary one
   * it waited its turn on a loaded machine (issue 39: 4 separate shards, 1gbit,1ms, on 2
   * cores; docs/benchmarks.md, "Where the ps sits"). It sleeps between packets, so it takes
   * little; the kernel's real-time throttling caps it all the same. Without the right
   * (not root) it stays at its ordinary priority, and links.json says which. Priority 40:
   * above the jobs people run at a low real-time priority themselves (`chrt -f 10` for a
   * steady measurement; at 10 too, this thread waited behind them and gpu-check's slow-links
   * check failed beside such runs), below the kernel's interrupt threads (50), which bring
   * the packets in. */
  struct sched_param sp = {.sched_priority = 40};
  d->st.realtime = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
  char buf[1 << 16];
  for (int i = 0; i < d->n; i++) d->pfd[i] = (struct pollfd){.fd = d->q[i].fd, .events = POLLIN};
  d->pfd[d->n] = (struct pollfd){.fd = d->wake, .events = POLLIN};
  for (;;) {
    int64_t next = release(d, 0);
    struct timespec ts, *tp = NULL;
    if (next != INT64_MAX) {
      int64_t wait = next - now_ns();
      if (wait < 0) wait = 0;
      ts = (struct timespec){.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
      tp = &ts;
    }
    int ready = ppoll(d->pfd, (nfds_t)d->n + 1, tp, NULL);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (d->pfd[d->n].revents) break;
    for (int i = 0; i < d->n; i++) {
      if (!d->pfd[i].revents) continue;
      /* A bounded batch, so that held packets are let through on time under a stream. */
      for (int k = 0; k < 64; k++) {
        ssize_t r = recv(d->q[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r < 0) break; /* EAGAIN, or ENOBUFS: the kernel dropped what it could not hand over */
        nfq_handle_packet(d->q[i].h, buf, (int)r);
      }
    }
  }
  struct timespec cpu;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
    d->thread_cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
  return NULL;
}

static void close_line(pl_delayline *d) {
  for (int i = 0; i < d->n; i++) {
    if (d->q[i].qh) nfq_destroy_queue(d->q[i].qh);
    if (d->q[i].h) nfq_close(d->q[i].h);
    free(d->q[i].ring);
  }
  free(d->q);
  free(d->pfd);
  if (d->wake >= 0) close(d->wake);
  free(d);
}

/* Queue q's socket, bound to its queue number in the calling thread's namespace. */
static int open_queue(dl_queue *q, const pl_delay_spec *spec, char *err, size_t errlen) {
  q->delay_ns = (int64_t)(spec->delay_s * 1e9 + 0.5);
  double l = spec->loss < 0 ? 0 : spec->loss > 1 ? 1 : spec->loss;
  q->drop_below = l >= 1 ? UINT64_MAX : (uint64_t)(l * 18446744073709551616.0);
  q->ring = malloc(QUEUE_CAP * sizeof *q->ring);
  if (!q->ring) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  q->h = nfq_open();
  if (!q->h) {
    int e = errno ? errno : EIO;
    snprintf(err, errlen, "cannot open a netfilter queue socket: %s", strerror(e));
    return -e;
  }
  q->fd = nfq_fd(q->h);
  int size = RCVBUF, one = 1;
  if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
    (void)setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  (void)setsockopt(q->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  q->qh = nfq_create_queue(q->h, (uint16_t)spec->queue, on_packet, q);
  if (!q->qh) {
    int e = errno ? errno : EIO;
    snprintf(err, errlen, "cannot bind netfilter queue %d: %s (does this kernel have "
             "CONFIG_NETFILTER_NETLINK_QUEUE?)", spec->queue, strerror(e));
    return -e;
  }
  if (nfq_set_mode(q->qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(q->qh, QUEUE_CAP) < 0 ||
      nfq_set_queue_flags(q->qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0) {
    int e = errno ? errno : EIO;
    snprintf(err, errlen, "cannot set up netfilter queue %d: %s", spec->queue, strerror(e));
    return -e;
  }
  return 0;
}

int pl_in_netns(const char *ns_path, int (*fn)(void *), void *arg) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = open(ns_path, O_RDONLY | O_CLOEXEC);
  int rc;
  if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) < 0) {
    rc = errno ? -errno : -EIO;
  } else {
    rc = fn(arg);
    if (setns(self, CLONE_NEWNET) < 0) {
      fprintf(stderr, "pstrain: cannot leave the namespace %s: %s\n", ns_path, strerror(errno));
      abort();
    }
  }
  if (self >= 0) close(self);
  if (target >= 0) close(target);
  return rc;
}

/* open_queue's arguments, through pl_in_netns. */
typedef struct {
  dl_queue *q;
  const pl_delay_spec *spec;
  char *err;
  size_t errlen;
} open_args;

static int open_queue_cb(void *arg) {
  open_args *a = arg;
  return open_queue(a->q, a->spec, a->err, a->errlen);
}

/* Opens queue q in its namespace: the socket belongs to the namespace it is made in. */
static int open_queue_in(dl_queue *q, const pl_delay_spec *spec, char *err, size_t errlen) {
  if (!spec->ns_path) return open_queue(q, spec, err, errlen);
  open_args a = {q, spec, err, errlen};
  err[0] = '\0'; /* open_queue's own failures say why; failing to enter leaves it empty */
  int rc = pl_in_netns(spec->ns_path, open_queue_cb, &a);
  if (rc < 0 && !err[0])
    snprintf(err, errlen, "cannot enter the namespace %s: %s", spec->ns_path, strerror(-rc));
  return rc;
}

int pl_delayline_start(pl_delayline **out, int n, const pl_delay_spec *spec, char *err,
                       size_t errlen) {
  *out = NULL;
  if (n <= 0 || n > 4096) {
    snprintf(err, errlen, "a delay line of %d queues", n);
    return -EINVAL;
  }
  pl_delayline *d = calloc(1, sizeof *d);
  if (!d || !(d->q = calloc((size_t)n, sizeof *d->q)) ||
      !(d->pfd = calloc((size_t)n + 1, sizeof *d->pfd))) {
    if (d) free(d->q);
    free(d);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  d->n = n;
  d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  d->rng = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
  int rc = d->wake < 0 ? -errno : 0;
  if (rc < 0) snprintf(err, errlen, "eventfd: %s", strerror(-rc));
  for (int i = 0; i < n && rc == 0; i++) {
    d->q[i].line = d;
    d->q[i].fd = -1;
    if (spec[i].queue < 0 || spec[i].queue > 65535) {
      snprintf(err, errlen, "netfilter queue %d: not 0..65535", spec[i].queue);
      rc = -EINVAL;
    } else {
      rc = open_queue_in(&d->q[i], &spec[i], err, errlen);
    }
  }
  d->started_ns = now_ns();
  stat_ticks(&d->steal0, &d->total0);
  if (rc == 0 && (rc = -pthread_create(&d->thread, NULL, serve, d)) < 0)
    snprintf(err, errlen, "cannot start the delay line's thread: %s", strerror(-rc));
  if (rc < 0) {
    close_line(d);
    return rc;
  }
  d->running = 1;
  *out = d;
  return 0;
}

void pl_delayline_stop(pl_delayline *d, pl_delayline_stats *st) {
  if (!d) return;
  if (d->running) {
    uint64_t one = 1;
    if (write(d->wake, &one, sizeof one) < 0) { /* an eventfd write does not fail here */ }
    pthread_join(d->thread, NULL);
  }
  release(d, 1);
  d->st.late_mean_s = d->released ? d->late_sum_s / (double)d->released : 0;
  /* pst_quant counts anything under 1 us as 1 us. */
  d->st.late_p50_s = pst_quant_value(&d->late, 0.5);
  d->st.late_p90_s = pst_quant_value(&d->late, 0.9);
  double life = (double)(now_ns() - d->started_ns) * 1e-9;
  d->st.cpu_share = life > 0 ? d->thread_cpu_s / life : 0;
  uint64_t steal, total;
  stat_ticks(&steal, &total);
  d->st.steal_share = total > d->total0 && steal >= d->steal0
                          ? (double)(steal - d->steal0) / (double)(total - d->total0)
                          : 0;
  if (st) *st = d->st;
  close_line(d);
}
