/* The ps's I/O threads: the bulk of a connection's bytes, moved off the loop thread.
 *
 * The loop thread keeps every rule (framing, sync order, pull versions, the store's
 * reference counts); what it hands out is only the copy between a socket and memory that
 * nobody else touches meanwhile: the payload of one gradient chunk into the place the reader
 * chose for it, or the frames of a pull reply's final chunks from a held store buffer. With
 * 8 workers each pushing and pulling a 100 MiB model those copies are most of the ps's CPU,
 * and one loop thread doing them all is the ceiling (issue 13). Jobs go to the helpers in
 * turn; each helper moves its jobs as their sockets allow, waiting in poll() on all of them
 * together, so the copies of several connections run on several cores at once and a peer
 * that stops reading or sending holds up nobody else's bytes.
 *
 * The connection (ps/net/conn.c, ps/net/pull.c) owns its jobs: while one is out, libuv does not
 * read (a read job) or write (a write job) that socket, so the bytes stay in order. A job
 * ends in one of two ways, never both:
 *   - its helper finishes and the loop thread runs job->done (from a uv_async callback);
 *   - the loop thread takes it back with ps_io_cancel, which returns once no helper touches
 *     the job, its socket or its memory any more (a closing connection's reader must not
 *     write into a sum that the step goes on without).
 * Plain TCP only: with TLS the bytes are encrypted on the loop thread (common/tls.h). */
#ifndef PSTRAIN_PS_IO_H
#define PSTRAIN_PS_IO_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/uio.h>
#include <uv.h>

/* Payloads smaller than this stay on the loop thread: handing a job over and back costs
 * two wakeups, some 10-20 us, about what copying 256 KiB costs. */
#define PS_IO_MIN_DEFAULT (256u * 1024u)
/* A write job carries at most this many buffers (a reply's chunks, header and payload each). */
#define PS_IO_MAX_IOV 64

typedef struct ps_io ps_io;
typedef struct ps_io_job ps_io_job;

typedef enum { PS_IO_READ = 0, PS_IO_WRITE = 1 } ps_io_dir;

struct ps_io_job {
  /* Set by the caller before ps_io_submit. */
  int fd;
  ps_io_dir dir;
  struct iovec iov[PS_IO_MAX_IOV]; /* [iovcnt]: where the bytes go or come from, in order
                                    * (the helper advances them as it goes) */
  int iovcnt;
  void (*done)(ps_io_job *job);    /* on the loop thread, once the helper finished */
  void *data;                      /* the caller's */
  _Atomic size_t progress;         /* bytes moved so far, as the helper goes (silence checks) */
  /* Set by the helper, valid once done runs or ps_io_cancel returns. */
  size_t moved;                    /* bytes read or written */
  int err;                         /* 0: all moved; UV_EOF: the peer closed; -ECANCELED;
                                    * or a negative errno from the socket */
  /* The pool's. */
  int out;                         /* the loop thread's: submitted and not yet back */
  int state;                       /* under the pool's lock */
  int helper;                      /* the helper it was given to */
  int iov_first;                   /* the helper's: the first iov not yet all moved */
  _Atomic int cancel;             /* ps_io_cancel asks the helper to stop */
  ps_io_job *next;
};

/* `helpers` threads (>= 1) and a uv_async on `loop` that delivers finished jobs. Helpers
 * block every signal. 0 or a negative code with *out NULL. */
int ps_io_create(uv_loop_t *loop, int helpers, ps_io **out);
/* Queues a job (none of its fields may change until it ends). 0 or a negative code; the job
 * is then not queued and the caller moves its bytes itself. */
int ps_io_submit(ps_io *io, ps_io_job *job);
/* Takes a queued or running job back: wakes its helper, waits until it lets go, and drops
 * the job's done callback. moved and err say what happened (-ECANCELED when it was stopped
 * early). Never blocks on the peer: a helper waiting on a socket is woken at once. */
void ps_io_cancel(ps_io *io, ps_io_job *job);
/* Bytes the job moved so far (any thread; for telling a slow peer from a silent one). */
size_t ps_io_progress(const ps_io_job *job);
/* Whether a job is out (queued, running, or finished with its callback still to run). */
int ps_io_busy(const ps_io_job *job);
/* Closes the async handle once no job is out (the ps's shutdown); the loop can then end. */
void ps_io_close(ps_io *io);
/* Joins the helpers and frees the pool, after the loop ended. NULL is allowed. */
void ps_io_free(ps_io *io);

#endif
