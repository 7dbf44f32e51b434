/* Optional mutual TLS for pstrain's connections (OpenSSL 3, TLS 1.3 only), as a layer that
 * plugs into libuv streams without taking over the socket: OpenSSL never sees a file
 * descriptor. Ciphertext that libuv read is fed in, plaintext comes out, and plaintext to send
 * is encrypted into buffers that go to uv_write.
 *
 * Three levels, each usable on its own:
 *
 *   pst_tls_ctx     one per process and role: the certificate, its key and the cluster's CA,
 *                   loaded and checked once (common/tls_context.c).
 *   pst_tls_conn    one TLS session over memory buffers, with no libuv in it: feed
 *                   ciphertext, read plaintext, write plaintext, take the ciphertext to send
 *                   (common/tls.c).
 *   pst_tls_stream  a uv_tcp_t with TLS on it, whose calls mirror libuv's (read_start with
 *                   the caller's own uv_alloc_cb/uv_read_cb, write with the caller's own
 *                   uv_write_t and scatter list, shutdown, close), or a plain pass-through to
 *                   libuv when made without a context (common/tls_stream.c). This is what the
 *                   ps and the worker use: the same code path with and without TLS.
 *
 * Trust. Both sides present a certificate signed by the cluster's CA, and each verifies the
 * other's against that CA: the ps refuses a client without a certificate or with one from
 * another CA, and the worker refuses a ps whose certificate the CA did not sign. Names are not
 * checked by default: inside a private cluster CA, every certificate the CA signed belongs to a
 * pstrain peer, so the CA itself is the trust boundary (and workers often reach the ps by an
 * address that no certificate would name). A deployment whose CA also signs other services'
 * certificates should pass the expected name (a DNS name or an IP address) to
 * pst_tls_conn_new / pst_tls_stream_init, which then must match the peer certificate's
 * subjectAltName (or CN). Session tickets and resumption are off: connections are few and
 * long-lived.
 *
 * Certificates for a cluster, e.g. with the openssl command (EC P-256, ten years):
 *   openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
 *     -subj /CN=pstrain-ca -keyout ca.key -out ca.pem
 *   openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj /CN=ps \
 *     -keyout ps.key -out ps.csr
 *   openssl x509 -req -in ps.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
 *     -out ps.pem     (and the same for each worker)
 * common/tls_pki.h makes a throwaway set with the API, for tests and benchmarks.
 *
 * Errors are negative codes (negative errno, or libuv's UV_* which are the same on Linux) with
 * a one-line reason: in (err, errlen) where a function takes them, else from
 * pst_tls_conn_error() / pst_tls_stream_strerror().
 *
 * ---- Write completion ----
 *
 * pst_tls_stream_write(s, req, bufs, n, cb) keeps the caller's scatter list (pointers into the
 * caller's memory, as uv_write does; the uv_buf_t array itself is copied) and encrypts it
 * lazily, at most PST_TLS_WINDOW bytes of ciphertext in flight per connection, so a 100 MiB
 * pull reply queued at once costs 1 MiB of ciphertext, not 100. The rule: a caller's write is
 * complete once all its plaintext has been encrypted and the uv_write of the ciphertext that
 * holds its last byte has completed; then cb(req, 0) runs. Callbacks run in the order the
 * writes were made, exactly once per accepted write: with a negative status when a write of
 * the ciphertext failed, and with UV_ECANCELED for writes still queued when the stream is
 * closed (before the close callback, as libuv does). The caller's bytes must stay untouched
 * until cb (as with uv_write); nothing is copied on the caller's side. A write made before the
 * handshake finished waits for it.
 *
 * ---- How the ps uses it (ps/main.c, ps/net/conn.h, ps/server.c, ps/net/pull.c, ps/net/admission.c) ----
 *
 *  1. Flags --tls-cert, --tls-key, --tls-ca (all three or none, also config-file keys,
 *     environment variables and systemd credentials): ps/main.c loads them with
 *     pst_tls_config_load (common/tls_config.h, shared with the worker) before any work, a
 *     bad file being a configuration error (exit 2) in one line naming it ("TLS key /etc/...
 *     does not match the certificate in ..."). The context goes to the server as
 *     ps_options.tls (NULL without TLS), and main frees it after ps_server_free. Mutual TLS
 *     authenticates every peer, so main.c's rule that a non-loopback --listen needs the
 *     cluster secret (or --insecure) accepts TLS instead; the HMAC handshake still works on
 *     top of TLS, unchanged, if both are configured.
 *  2. ps/net/conn.h: `uv_tcp_t tcp;` becomes `pst_tls_stream io;`. Its first member is the
 *     connection's uv_tcp_t, io.tcp, so handle-level calls (uv_accept, uv_tcp_nodelay,
 *     uv_tcp_getpeername, uv_fileno in admission.c, tcp.data) take &c->io.tcp instead of
 *     &c->tcp, and the callbacks registered through the stream receive that same handle:
 *     on_alloc, on_read, on_ctl_write, on_pull_write, on_shutdown_done and on_conn_closed keep
 *     their code (h->data is still c).
 *  3. on_connection: `uv_tcp_init(s->loop, &c->tcp); c->tcp.data = c;` becomes
 *       int rc = pst_tls_stream_init(&c->io, s->loop, s->tls, NULL, why, sizeof why);
 *       c->io.tcp.data = c;
 *     (s->tls NULL: plain TCP, every call below is then libuv's own). rc < 0 is handled like a
 *     failed uv_accept, whose `uv_close((uv_handle_t *)&c->tcp, on_conn_closed)` becomes
 *     pst_tls_stream_close(&c->io, on_conn_closed).
 *  4. start_reading: uv_read_start(...) -> pst_tls_stream_read_start(&c->io, on_alloc, on_read).
 *     The handshake runs by itself from the first read_start. on_alloc is unchanged: the
 *     auth handshake's exact-size buffers (ps_auth_buffer) and the reader's buffers
 *     (pst_reader_buffer) get plaintext decrypted straight into them, at most one TLS record
 *     (16 KiB) per on_read call, and what does not fit stays in the stream for the next
 *     on_alloc, as it would stay in the socket.
 *  5. on_read: `uv_read_stop(stream)` on PST_READER_PAUSE -> pst_tls_stream_read_stop(&c->io)
 *     (this one matters: decrypted data may be waiting, and only the stream knows to hold it);
 *     the close reason `uv_strerror((int)nread)` -> pst_tls_stream_strerror(&c->io, (int)nread),
 *     which names a TLS failure ("TLS handshake failed: the peer's certificate is not signed
 *     by our CA (...)") and is uv_strerror otherwise; UV_EOF keeps its meaning (a port probe
 *     that connects and leaves is a plain EOF, not a TLS failure). ps_conn_close's
 *     uv_read_stop -> pst_tls_stream_read_stop too. After pst_reader_resume, start_reading as
 *     now: the stream first delivers what it holds (from the loop, never inside read_start).
 *  6. ps_send_header and ps_send_raw: uv_write(&m->req, (uv_stream_t *)&c->tcp, &b, 1,
 *     on_ctl_write) -> pst_tls_stream_write(&c->io, &m->req, &b, 1, on_ctl_write) (both now
 *     through proto/send.h, which the worker's control frames share).
 *  7. pull.c ps_pull_continue: uv_write(&c->wreq[i], (uv_stream_t *)&c->tcp, bufs, 2,
 *     on_pull_write) -> pst_tls_stream_write(&c->io, &c->wreq[i], bufs, 2, on_pull_write).
 *     The header slot and the weights stay as they are (zero-copy on the ps's side);
 *     on_pull_write still runs once per chunk (see "Write completion"), so pull_done and
 *     finish_pull, which release the weight buffer, need no change. A negative return means
 *     no callback, as with uv_write, and ps_pull_abandon handles it as now.
 *  8. ps_conn_close: uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown_done)
 *     -> pst_tls_stream_shutdown(&c->io, &c->shutdown_req, on_shutdown_done) (sends the
 *     queued writes, then TLS close_notify, then the TCP FIN); both uv_close calls (there and in
 *     on_shutdown_done) -> pst_tls_stream_close(&c->io, on_conn_closed). admission.c's drain
 *     of unread bytes with recv() on the fd is harmless with TLS (it discards ciphertext).
 *  9. Logs: pst_tls_stream_on_handshake(&c->io, cb) before read_start, and in cb
 *     pst_tls_stream_describe(&c->io, buf, len) gives "TLSv1.3 TLS_AES_256_GCM_SHA384, peer
 *     CN=worker-3" for the connection's log line. A peer that connects and never finishes its
 *     handshake is an unregistered connection like any other (ps_admit's bound and whatever
 *     deadline the ps gives those).
 *  A plaintext worker meeting a TLS ps is refused with "TLS handshake failed: the peer does not
 *  speak TLS (it sent "PSTR...." in the clear)" in the ps's log. When its first bytes were a
 *  frame (pst_tls_stream_failure PST_TLS_FAIL_PLAINTEXT, pst_tls_stream_first_bytes "PSTR"),
 *  ps_refuse_plaintext answers it with an ERROR frame in the clear, by uv_try_write on
 *  &c->io.tcp, as admission.c does for a worker without the secret.
 *  Memory per TLS connection, allocated as it is first needed and then reused: up to
 *  PST_TLS_WINDOW + one block of ciphertext in flight plus a few spare blocks (about 1.5 MiB
 *  in all), a PST_TLS_IN_BUF input buffer and OpenSSL's record buffers (about 40 KiB): about
 *  1.8 MiB, so the ps's memory bound (weights x 2 + 32 MiB) needs about 2 MiB more per
 *  worker with TLS on.
 *  A peer that resets the connection fails a write with EPIPE: the process must ignore
 *  SIGPIPE, as the daemons do (pst_log_guard_signals).
 *
 * ---- How the worker uses it (worker/client.c, worker/client.h, worker/main.c) ----
 *
 *  1. Flags --tls-cert, --tls-key, --tls-ca (optionally --tls-name, the ps's expected name):
 *     pst_tls_config_load(PST_TLS_CLIENT, ...) once at start; the ctx goes to wk_client_start
 *     (arguments beside the secret, NULL without TLS) and lives until exit.
 *  2. wk_client: `uv_tcp_t tcp;` -> `pst_tls_stream io;` and &c->tcp -> &c->io.tcp for
 *     handle-level calls (uv_tcp_connect, uv_tcp_nodelay, uv_is_closing, the h == &c->tcp test
 *     in on_handle_closed).
 *  3. on_resolved: `uv_tcp_init(c->loop, &c->tcp); c->tcp.data = c;` ->
 *       rc = pst_tls_stream_init(&c->io, c->loop, c->tls, c->tls_name, why, sizeof why);
 *       c->io.tcp.data = c;   (rc < 0: close with why). A new stream per attempt is right:
 *     init after each close.
 *  4. on_connect: both uv_read_start calls -> pst_tls_stream_read_start(&c->io, on_alloc,
 *     on_read). The auth hello (send_raw) and the HELLO sent from on_connected are queued
 *     until the TLS handshake finishes; on_alloc's exact-size challenge buffer works as with
 *     TCP. on_read's close reason for nread < 0 other than UV_EOF ->
 *     pst_tls_stream_strerror(&c->io, (int)nread) in both states (the AUTH state's fixed
 *     sentence would hide a TLS refusal), so a refusal reads "TLS session failed: the peer
 *     refused the session: tlsv1 alert unknown ca (...)". Such a failure does not go away by
 *     retrying: when pst_tls_stream_failure says PST_TLS_FAIL_REFUSED or _PLAINTEXT, the
 *     client marks it (tls_refused) and the trainer ends the worker with exit 2, a
 *     configuration error, instead of the reconnect loop; PST_TLS_FAIL_BROKEN (a handshake
 *     cut short, which a stopping ps also causes) is a lost connection like any other.
 *  5. send_raw, wk_client_send and wk_client_push: uv_write(...) ->
 *     pst_tls_stream_write(&c->io, ...) with the same arguments (the first two now through
 *     proto/send.h); on_push_write's counting is unchanged.
 *  6. wk_client_send_now: uv_try_write(...) -> pst_tls_stream_try_write(&c->io, &b, 1), which
 *     returns the byte count when the plaintext was taken whole (encrypted, and its ciphertext
 *     written, or its tail queued) and UV_EAGAIN otherwise; `rc == n` stays the test.
 *  7. Every uv_close((uv_handle_t *)&c->tcp, cb) (wk_client_close, retry_later) ->
 *     pst_tls_stream_close(&c->io, cb); the callback still receives &c->io.tcp.
 */
#ifndef PSTRAIN_COMMON_TLS_H
#define PSTRAIN_COMMON_TLS_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

/* Ciphertext in flight per stream, and the plaintext encrypted per uv_write. */
#define PST_TLS_WINDOW (1u << 20)
#define PST_TLS_BLOCK (256u * 1024u)
/* Ciphertext read per uv_read (the stream's input buffer). */
#define PST_TLS_IN_BUF (256u * 1024u)

typedef enum { PST_TLS_SERVER = 0, PST_TLS_CLIENT = 1 } pst_tls_role;

/* ---- contexts ---- */

typedef struct pst_tls_ctx pst_tls_ctx;

/* Loads cert (PEM, the leaf first, then any intermediates), its private key and the CA
 * certificates peers must be signed by, and checks them: every file readable and parseable,
 * the key matching the certificate, the certificate signed by the CA (and in date). TLS 1.3
 * only, peers verified against the CA, a server requiring a client certificate. cert and key
 * may both be NULL for a client, which then offers no certificate (tests of refusals: a
 * pstrain server refuses it). Returns 0 with *out set, or a negative code with a one-line
 * reason naming the file. */
int pst_tls_ctx_new(pst_tls_role role, const char *cert, const char *key, const char *ca,
                    pst_tls_ctx **out, char *err, size_t errlen);
/* OpenSSL's TLS 1.3 suite list, e.g. "TLS_CHACHA20_POLY1305_SHA256" or
 * "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"; the default (NULL or "") is OpenSSL's,
 * AES-256-GCM first. A server follows its own order. Returns 0 or -EINVAL with a reason. */
int pst_tls_ctx_set_ciphersuites(pst_tls_ctx *ctx, const char *list, char *err, size_t errlen);
pst_tls_role pst_tls_ctx_role(const pst_tls_ctx *ctx);
/* Connections made from ctx keep what they need: it may be freed before them. */
void pst_tls_ctx_free(pst_tls_ctx *ctx);

/* ---- one session over memory buffers ---- */

typedef struct pst_tls_conn pst_tls_conn;

/* Ciphertext taken from a connection, to hand to the transport: buf stays valid until
 * pst_tls_out_release. */
typedef struct pst_tls_out {
  uv_buf_t buf;
  size_t cap;               /* private */
  struct pst_tls_out *next; /* private */
} pst_tls_out;

/* peer_name: NULL, or the name (or IP address) the peer's certificate must carry. */
int pst_tls_conn_new(pst_tls_ctx *ctx, const char *peer_name, pst_tls_conn **out, char *err,
                     size_t errlen);
/* Every pst_tls_out taken must have been released first. */
void pst_tls_conn_free(pst_tls_conn *c);

/* Starts the handshake (a client's first flight goes to the pending output). Also done by
 * the first feed. Returns 0 or a negative code. */
int pst_tls_start(pst_tls_conn *c);
/* Ciphertext read from the socket: copied in, and the handshake driven. Returns 0 or a
 * negative code (the reason in pst_tls_conn_error; the peer's alert, if one is due, is in the
 * pending output: send it before closing). */
int pst_tls_feed(pst_tls_conn *c, const void *buf, size_t n);
/* The same without the copy: where the next read may land (at least 16 KiB), then how much
 * landed there. */
void pst_tls_in_buffer(pst_tls_conn *c, char **base, size_t *len);
int pst_tls_in_commit(pst_tls_conn *c, size_t n);
/* The transport's end of file: after the plaintext before it, reads return UV_EOF (or an
 * error when it cut the handshake short). */
void pst_tls_feed_eof(pst_tls_conn *c);
/* Decrypted bytes available now without more input: >0 (one record's worth at most), 0 (more
 * ciphertext needed), UV_EOF (the peer's close_notify, or the transport's end of file after
 * the handshake), or a negative code. Never blocks; decrypts at most one record. */
ssize_t pst_tls_readable(pst_tls_conn *c);
/* Copies up to n decrypted bytes into buf: same returns as pst_tls_readable. */
ssize_t pst_tls_read(pst_tls_conn *c, void *buf, size_t n);
/* Encrypts the whole scatter list (small pieces share records, so a frame header and the
 * start of its payload go in one). Returns the plaintext bytes taken (all of them),
 * -EAGAIN before the handshake finished, or a negative code. */
ssize_t pst_tls_write(pst_tls_conn *c, const uv_buf_t *bufs, int nbufs);
/* Queues close_notify (after the handshake; a no-op before it). Returns 0 or a negative code. */
int pst_tls_close_notify(pst_tls_conn *c);
/* Bytes of ciphertext waiting to be taken. */
size_t pst_tls_pending_out(const pst_tls_conn *c);
/* Takes the ciphertext waiting to be sent (NULL when none). Release it once written. */
pst_tls_out *pst_tls_take_out(pst_tls_conn *c);
void pst_tls_out_release(pst_tls_conn *c, pst_tls_out *o);

/* 1 once the handshake finished (the peer verified), 0 before, negative after a failure. */
int pst_tls_handshake_state(const pst_tls_conn *c);
/* Whether input (ciphertext or decrypted bytes) is buffered inside. */
int pst_tls_has_input(const pst_tls_conn *c);
/* Whether the peer's close_notify arrived before the transport's end of file. */
int pst_tls_clean_eof(const pst_tls_conn *c);
/* The reason of the last failure ("" when none). */
const char *pst_tls_conn_error(const pst_tls_conn *c);
/* What kind of failure that was, for callers that act on it rather than log it: whether
 * another try could go better (a worker reconnects) or not (it stops with a configuration
 * error). */
typedef enum {
  PST_TLS_FAIL_NONE = 0,
  /* Cut short, corrupted or garbled: the network, or a peer that went away (also a peer that
   * closed during the handshake, which may be a plaintext server or a refusal without an
   * alert, but also a server that was stopping). */
  PST_TLS_FAIL_BROKEN,
  /* The two ends do not trust each other: a certificate refused by either side (not signed
   * by the CA, a wrong name, none sent), or an alert by which the peer refused the session.
   * Retrying cannot mend it: certificates or CAs must change. */
  PST_TLS_FAIL_REFUSED,
  /* The peer does not speak TLS: its first bytes were something else. */
  PST_TLS_FAIL_PLAINTEXT,
} pst_tls_failure;
pst_tls_failure pst_tls_conn_failure(const pst_tls_conn *c);
/* For PST_TLS_FAIL_PLAINTEXT: the peer's first bytes (up to len, at most 8 are kept), so that
 * a server can tell a client of its own protocol without TLS, and answer it in the clear.
 * Returns how many were copied (0 for other failures). */
size_t pst_tls_conn_first_bytes(const pst_tls_conn *c, void *buf, size_t len);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384, peer CN=worker-3" once the handshake finished. */
void pst_tls_conn_describe(const pst_tls_conn *c, char *buf, size_t len);

/* ---- a uv_tcp_t with (optional) TLS ---- */

typedef struct pst_tls_stream pst_tls_stream;
struct pst_tls_sx;
/* Called once, when the handshake finished (status 0) or failed (negative); never when the
 * connection broke first. A TLS 1.3 client finishes before the server has checked its
 * certificate: a refusal of it comes later, as a read error. */
typedef void (*pst_tls_handshake_cb)(pst_tls_stream *s, int status);

struct pst_tls_stream {
  uv_tcp_t tcp;           /* the connection's handle: first, so callbacks can find the stream */
  struct pst_tls_sx *x;   /* private: the TLS state, NULL for plain TCP */
};

/* uv_tcp_init(loop, &s->tcp) and, with a ctx, a TLS session of the ctx's role (server: the
 * accepting side). Set s->tcp.data after this; then uv_accept or uv_tcp_connect on &s->tcp.
 * ctx NULL: plain TCP, every call below being libuv's own. peer_name as for
 * pst_tls_conn_new. On failure the handle is still initialised: close it with
 * pst_tls_stream_close. */
int pst_tls_stream_init(pst_tls_stream *s, uv_loop_t *loop, pst_tls_ctx *ctx,
                        const char *peer_name, char *err, size_t errlen);
/* Optional, before the first read_start/write. */
void pst_tls_stream_on_handshake(pst_tls_stream *s, pst_tls_handshake_cb cb);
/* As uv_read_start / uv_read_stop on &s->tcp: the callbacks get (uv_handle_t *)&s->tcp and
 * plaintext. With TLS, read_cb also gets UV_EPROTO (or a transport error) when the session
 * fails, with the reason in pst_tls_stream_strerror, and data already decrypted is delivered
 * from the loop after a read_start, not inside it. The first read_start (or write) starts the
 * handshake. */
int pst_tls_stream_read_start(pst_tls_stream *s, uv_alloc_cb alloc_cb, uv_read_cb read_cb);
int pst_tls_stream_read_stop(pst_tls_stream *s);
/* As uv_write on &s->tcp (see "Write completion" above). Returns 0, or a negative code and
 * then cb never runs. */
int pst_tls_stream_write(pst_tls_stream *s, uv_write_t *req, const uv_buf_t bufs[],
                         unsigned nbufs, uv_write_cb cb);
/* As uv_try_write: with TLS, the whole plaintext is taken only when nothing else waits to be
 * sent (UV_EAGAIN otherwise); its ciphertext is written now as far as the socket takes it, and
 * the rest (a record cannot be taken back once made) is queued. Returns the byte count taken
 * or a negative code. */
int pst_tls_stream_try_write(pst_tls_stream *s, const uv_buf_t bufs[], unsigned nbufs);
/* As uv_shutdown: after every queued write, TLS close_notify, then the TCP FIN; cb(req,
 * status) runs after that. */
int pst_tls_stream_shutdown(pst_tls_stream *s, uv_shutdown_t *req, uv_shutdown_cb cb);
/* As uv_close(&s->tcp, cb): queued writes complete with UV_ECANCELED, then cb runs with
 * (uv_handle_t *)&s->tcp after the TLS state is freed. A second call is ignored. */
void pst_tls_stream_close(pst_tls_stream *s, uv_close_cb cb);
/* uv_strerror(code), or for a TLS failure its reason ("TLS: ..."). */
const char *pst_tls_stream_strerror(const pst_tls_stream *s, int code);
/* pst_tls_conn_failure and pst_tls_conn_first_bytes of the stream's session (NONE and 0
 * without TLS). Like the reason, they are there until the stream is closed: ask in the read
 * callback that got the failure. */
pst_tls_failure pst_tls_stream_failure(const pst_tls_stream *s);
size_t pst_tls_stream_first_bytes(const pst_tls_stream *s, void *buf, size_t len);
/* Whether the stream carries TLS, and a description for logs once the handshake finished
 * ("plain TCP" without TLS). */
int pst_tls_stream_is_tls(const pst_tls_stream *s);
void pst_tls_stream_describe(const pst_tls_stream *s, char *buf, size_t len);

#endif
