/* `pstrain bench --tls`: what TLS (common/tls.h) costs with the bench's traffic.
 *
 * pstrain-benchclient has no TLS flags, so this measures the layer itself (the one the ps and
 * the worker use with --tls-*) on the bench's pattern: a
 * server process and N client processes on loopback, all on libuv through pst_tls_stream,
 * each client doing rounds of push (S bytes as chunk writes, each a header and a pointer into
 * its S-byte gradient buffer, all queued at once as worker/client.c does) and pull (the server
 * answers with S bytes the same way from its weight buffer, as ps/net/pull.c does), headers read
 * into a scratch and payloads straight into place, as the frame reader does. Run without a
 * context (the stream is then libuv's own calls) and with TLS, the ratio of the two is what TLS
 * costs; the raw poll baseline of bench_tcp.c is the third reference. */
#ifndef PSTRAIN_LAUNCHER_BENCH_TLS_H
#define PSTRAIN_LAUNCHER_BENCH_TLS_H

#include <stddef.h>

#include "launcher/bench/bench.h"

typedef struct {
  const char *pki_dir;   /* certificates made by pst_tls_pki_make(pki_dir, "bench"); NULL: plain */
  const char *suites;    /* OpenSSL's TLS 1.3 suite list; NULL or "": OpenSSL's default */
  size_t chunk;          /* bytes of payload per write */
} pl_bench_tls_opts;

/* Runs one cell of the echo: `warmup` untimed rounds (the handshake among them) and `rounds`
 * timed ones per client. suite_out gets the suite the first client negotiated ("plain" without
 * TLS). Returns 0, or a negative code with a one-line reason in err. */
int pl_bench_uv(size_t bytes, int clients, long rounds, long warmup, const pl_bench_tls_opts *o,
                pl_bench_figs *f, char *suite_out, size_t suite_len, char *err, size_t errlen);

#endif
