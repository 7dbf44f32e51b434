/* For in-process tests of the ps (ps/server_test.c, tests/fuzz/fuzz_ps_server.c): a client
 * socket connected to a ps_server running on the same thread. Header only, test use only. */
#ifndef PSTRAIN_PS_TEST_CONNECT_H
#define PSTRAIN_PS_TEST_CONNECT_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

/* A non-blocking TCP socket connected to `listener` (with TCP_NODELAY, as the worker sets:
 * without it a small frame sent while the last is unacknowledged waits for the ps's delayed
 * ACK, tens of milliseconds), or -1. The ps accepts from its loop, so the loop runs until the
 * connection is up: a blocking connect would wait for it forever, and for SYN retries
 * (seconds) once many connections in a row have filled the accept queue. */
static inline int ps_test_connect(uv_loop_t *loop, uv_tcp_t *listener) {
  struct sockaddr_storage sa;
  int len = sizeof sa;
  if (uv_tcp_getsockname(listener, (struct sockaddr *)&sa, &len) < 0) return -1;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int rc = connect(fd, (struct sockaddr *)&sa, (socklen_t)len);
  for (int i = 0; rc < 0 && errno == EINPROGRESS && i < 2000; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    struct pollfd pf = {fd, POLLOUT, 0};
    if (poll(&pf, 1, 1) == 1) {
      int e = 0;
      socklen_t el = sizeof e;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
      rc = e ? -1 : 0;
      errno = e;
    }
  }
  if (rc < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

#endif
