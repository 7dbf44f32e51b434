#include "ps/net/io.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

enum { JOB_IDLE = 0, JOB_QUEUED, JOB_RUNNING, JOB_FINISHED };

/* Jobs one helper moves at once. A job whose socket is not ready never holds up the others:
 * the helper waits in poll() on all of its jobs' sockets together, as an event loop does. */
#define IO_ACTIVE 64

typedef struct {
  ps_io *io;
  int idx;
  int wake;            /* eventfd: a job was queued for this helper, or one was cancelled */
  pthread_t th;
  ps_io_job *queue, *queue_tail; /* under io->mu */
} io_helper;

struct ps_io {
  uv_async_t async;    /* a job finished: run its callback on the loop thread */
  pthread_mutex_t mu;
  pthread_cond_t settled; /* a running job finished (ps_io_cancel waits for it) */
  ps_io_job *done, *done_tail;
  int stop;
  /* The loop thread's: jobs out, the next helper to give one to, and the shutdown. */
  int out;
  int next;
  int closing, closed;
  int n;
  io_helper *h;        /* [n] */
};

static void push(ps_io_job **head, ps_io_job **tail, ps_io_job *j) {
  j->next = NULL;
  if (*tail) (*tail)->next = j;
  else *head = j;
  *tail = j;
}

static void unlink_job(ps_io_job **head, ps_io_job **tail, ps_io_job *j) {
  ps_io_job *prev = NULL;
  for (ps_io_job *k = *head; k; prev = k, k = k->next) {
    if (k != j) continue;
    if (prev) prev->next = k->next;
    else *head = k->next;
    if (*tail == k) *tail = prev;
    k->next = NULL;
    return;
  }
}

static void wake(io_helper *h) {
  uint64_t one = 1;
  if (write(h->wake, &one, sizeof one) < 0) {
    /* The counter is full: a wake-up is pending already. */
  }
}

/* Moves what the socket takes now (non-blocking: libuv made it so). Returns 1 when the job
 * is over (all moved, the peer closed, an error), 0 when the socket would block. */
static int step(ps_io_job *j) {
  for (;;) {
    /* Empty buffers move nothing: a sendmsg of nothing else would return 0, which reads as a
     * closed peer below. */
    while (j->iov_first < j->iovcnt && j->iov[j->iov_first].iov_len == 0) j->iov_first++;
    if (j->iov_first == j->iovcnt) return 1;
    struct msghdr msg = {.msg_iov = j->iov + j->iov_first,
                         .msg_iovlen = (size_t)(j->iovcnt - j->iov_first)};
    /* MSG_NOSIGNAL: a peer that went away is an error here, never a SIGPIPE. */
    ssize_t n = j->dir == PS_IO_READ ? recvmsg(j->fd, &msg, 0) : sendmsg(j->fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      j->moved += (size_t)n;
      atomic_store_explicit(&j->progress, j->moved, memory_order_relaxed);
      for (size_t left = (size_t)n; left > 0;) {
        struct iovec *v = &j->iov[j->iov_first];
        size_t take = left < v->iov_len ? left : v->iov_len;
        v->iov_base = (char *)v->iov_base + take;
        v->iov_len -= take;
        left -= take;
        if (v->iov_len == 0) j->iov_first++;
      }
      continue;
    }
    if (n == 0 && j->dir == PS_IO_READ) {
      j->err = UV_EOF;
      return 1;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    j->err = n < 0 ? -errno : -EIO;
    return 1;
  }
}

static void finish(ps_io *io, ps_io_job *j) {
  pthread_mutex_lock(&io->mu);
  j->state = JOB_FINISHED;
  push(&io->done, &io->done_tail, j);
  pthread_cond_broadcast(&io->settled);
  /* Under the lock: the loop thread closes the async handle only once no job is out, and a
   * job is out until the loop took it off the done list, which needs this lock. */
  uv_async_send(&io->async);
  pthread_mutex_unlock(&io->mu);
}

static void *helper_main(void *arg) {
  io_helper *h = arg;
  ps_io *io = h->io;
  ps_io_job *active[IO_ACTIVE];
  struct pollfd pfd[IO_ACTIVE + 1];
  int n = 0;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    /* Wake-ups are taken before the state they announce is read: one that comes after this
     * read stays pending and ends the poll() below, so none is ever lost. */
    uint64_t v;
    if (read(h->wake, &v, sizeof v) < 0) { /* none pending */ }
    pthread_mutex_lock(&io->mu);
    while (h->queue && n < IO_ACTIVE) {
      ps_io_job *j = h->queue;
      unlink_job(&h->queue, &h->queue_tail, j);
      j->state = JOB_RUNNING;
      active[n++] = j;
    }
    int stop = io->stop;
    pthread_mutex_unlock(&io->mu);
    if (stop && n == 0) break;
    /* Each job as far as its socket lets it; the finished ones leave the set. */
    for (int i = 0; i < n;) {
      ps_io_job *j = active[i];
      int over = 1;
      if (atomic_load_explicit(&j->cancel, memory_order_acquire)) j->err = -ECANCELED;
      else over = step(j);
      if (!over) {
        i++;
        continue;
      }
      active[i] = active[--n];
      finish(io, j);
    }
    /* The stop may have come while jobs were still out: with the last of them over, nothing
     * would wake this thread again. */
    if (stop && n == 0) break;
    pfd[0] = (struct pollfd){.fd = h->wake, .events = POLLIN};
    for (int i = 0; i < n; i++)
      pfd[i + 1] = (struct pollfd){.fd = active[i]->fd,
                                   .events = active[i]->dir == PS_IO_READ ? POLLIN : POLLOUT};
    if (poll(pfd, (nfds_t)n + 1, -1) < 0 && errno != EINTR) {
      /* Cannot wait (out of memory in the kernel): try again shortly rather than spin. */
      usleep(1000);
    }
  }
  return NULL;
}

static void maybe_close(ps_io *io) {
  if (io->closing && !io->closed && io->out == 0) {
    io->closed = 1;
    uv_close((uv_handle_t *)&io->async, NULL);
  }
}

/* Runs finished jobs' callbacks one at a time: a callback may cancel another job (a close),
 * which must then still find it on the done list. */
static void on_async(uv_async_t *a) {
  ps_io *io = a->data;
  for (;;) {
    pthread_mutex_lock(&io->mu);
    ps_io_job *j = io->done;
    if (j) {
      unlink_job(&io->done, &io->done_tail, j);
      j->state = JOB_IDLE;
    }
    pthread_mutex_unlock(&io->mu);
    if (!j) break;
    io->out--;
    j->out = 0;
    j->done(j);
  }
  maybe_close(io);
}

int ps_io_create(uv_loop_t *loop, int helpers, ps_io **out) {
  *out = NULL;
  if (helpers < 1) return -EINVAL;
  ps_io *io = calloc(1, sizeof *io);
  if (!io) return -ENOMEM;
  io->h = calloc((size_t)helpers, sizeof *io->h);
  if (!io->h) {
    free(io);
    return -ENOMEM;
  }
  pthread_mutex_init(&io->mu, NULL);
  pthread_cond_init(&io->settled, NULL);
  int rc = 0;
  for (int i = 0; i < helpers; i++) {
    io_helper *h = &io->h[i];
    h->io = io;
    h->idx = i;
    h->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->wake < 0 || pthread_create(&h->th, NULL, helper_main, h) != 0) {
      rc = h->wake < 0 ? -errno : -EAGAIN;
      if (h->wake >= 0) close(h->wake);
      break;
    }
    io->n++;
  }
  /* The async handle comes last: a pool that could not start is freed at once, and a handle
   * once initialised could only be freed after its close callback. No helper sends to it
   * before a job is queued. */
  if (rc == 0) rc = uv_async_init(loop, &io->async, on_async);
  if (rc < 0) {
    ps_io_free(io);
    return rc;
  }
  io->async.data = io;
  *out = io;
  return 0;
}

int ps_io_submit(ps_io *io, ps_io_job *job) {
  if (io->closing || job->iovcnt < 1 || job->iovcnt > PS_IO_MAX_IOV) return -ECANCELED;
  job->moved = 0;
  job->err = 0;
  job->iov_first = 0;
  atomic_store_explicit(&job->cancel, 0, memory_order_relaxed);
  atomic_store_explicit(&job->progress, 0, memory_order_relaxed);
  /* In turn: a helper's jobs share its core, and a job that waits holds up none of them. */
  io_helper *h = &io->h[io->next];
  io->next = (io->next + 1) % io->n;
  pthread_mutex_lock(&io->mu);
  job->state = JOB_QUEUED;
  job->helper = h->idx;
  push(&h->queue, &h->queue_tail, job);
  pthread_mutex_unlock(&io->mu);
  wake(h);
  io->out++;
  job->out = 1;
  return 0;
}

void ps_io_cancel(ps_io *io, ps_io_job *job) {
  if (!job->out) return;
  pthread_mutex_lock(&io->mu);
  if (job->state == JOB_QUEUED) {
    io_helper *h = &io->h[job->helper];
    unlink_job(&h->queue, &h->queue_tail, job);
    job->err = -ECANCELED;
  } else {
    if (job->state == JOB_RUNNING) {
      atomic_store_explicit(&job->cancel, 1, memory_order_release);
      wake(&io->h[job->helper]);
      while (job->state == JOB_RUNNING) pthread_cond_wait(&io->settled, &io->mu);
    }
    unlink_job(&io->done, &io->done_tail, job);
  }
  job->state = JOB_IDLE;
  pthread_mutex_unlock(&io->mu);
  io->out--;
  job->out = 0;
  maybe_close(io);
}

int ps_io_busy(const ps_io_job *job) { return job->out; }

size_t ps_io_progress(const ps_io_job *job) {
  return atomic_load_explicit(&job->progress, memory_order_relaxed);
}

void ps_io_close(ps_io *io) {
  if (!io) return;
  io->closing = 1;
  maybe_close(io);
}

void ps_io_free(ps_io *io) {
  if (!io) return;
  pthread_mutex_lock(&io->mu);
  io->stop = 1;
  pthread_mutex_unlock(&io->mu);
  for (int i = 0; i < io->n; i++) wake(&io->h[i]);
  for (int i = 0; i < io->n; i++) {
    pthread_join(io->h[i].th, NULL);
    close(io->h[i].wake);
  }
  pthread_cond_destroy(&io->settled);
  pthread_mutex_destroy(&io->mu);
  free(io->h);
  free(io);
}
