/* The I/O threads (ps/net/io.h) in process: a write job and a read job over a socketpair
 * move exactly their bytes, and empty buffers among them (a sparse delta chunk of no pairs:
 * its payload is empty) move nothing and fail nothing, last of the job included. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/check.h"
#include "ps/net/io.h"

static int done_count;
static void on_done(ps_io_job *j) {
  (void)j;
  done_count++;
}

/* Runs the loop until `want` jobs are done (the helpers deliver through a uv_async). */
static void wait_done(uv_loop_t *loop, int want) {
  for (int i = 0; i < 2000 && done_count < want; i++) uv_run(loop, UV_RUN_ONCE);
}

int main(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  ps_io *io = NULL;
  CHECK(ps_io_create(&loop, 2, &io) == 0 && io != NULL);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
  static char a[3000], b[5000], got[8000];
  memset(a, 'a', sizeof a);
  memset(b, 'b', sizeof b);
  /* Write: a, an empty buffer, b, and an empty buffer last. */
  static ps_io_job w, r;
  w.fd = sv[0];
  w.dir = PS_IO_WRITE;
  w.iov[0] = (struct iovec){a, sizeof a};
  w.iov[1] = (struct iovec){b, 0};
  w.iov[2] = (struct iovec){b, sizeof b};
  w.iov[3] = (struct iovec){a, 0};
  w.iovcnt = 4;
  w.done = on_done;
  CHECK(ps_io_submit(io, &w) == 0);
  wait_done(&loop, 1);
  CHECKF(done_count == 1 && w.err == 0 && w.moved == sizeof a + sizeof b,
         "done %d, err %d, moved %zu", done_count, w.err, w.moved);
  /* Read them back, into a buffer cut with an empty piece in the middle. */
  r.fd = sv[1];
  r.dir = PS_IO_READ;
  r.iov[0] = (struct iovec){got, 4000};
  r.iov[1] = (struct iovec){got + 4000, 0};
  r.iov[2] = (struct iovec){got + 4000, 4000};
  r.iovcnt = 3;
  r.done = on_done;
  CHECK(ps_io_submit(io, &r) == 0);
  wait_done(&loop, 2);
  CHECKF(done_count == 2 && r.err == 0 && r.moved == 8000, "err %d, moved %zu", r.err, r.moved);
  CHECK(memcmp(got, a, sizeof a) == 0 && memcmp(got + sizeof a, b, sizeof b) == 0);
  /* A write job of nothing but empty buffers is done at once, without error. */
  memset(&w, 0, sizeof w);
  w.fd = sv[0];
  w.dir = PS_IO_WRITE;
  w.iov[0] = (struct iovec){a, 0};
  w.iovcnt = 1;
  w.done = on_done;
  CHECK(ps_io_submit(io, &w) == 0);
  wait_done(&loop, 3);
  CHECKF(done_count == 3 && w.err == 0 && w.moved == 0, "err %d, moved %zu", w.err, w.moved);
  ps_io_close(io);
  uv_run(&loop, UV_RUN_DEFAULT);
  ps_io_free(io);
  close(sv[0]);
  close(sv[1]);
  uv_loop_close(&loop);
  printf("io_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
