/* Inside the ps: one peer's connection, shared by its reading (ps/net/read.c), its end
 * (ps/net/conn.c), the push path (ps/server.c), the messages (ps/net/messages.c) and the pull
 * path (ps/net/pull.c). Not part of the ps's interface. */
#ifndef PSTRAIN_PS_CONN_H
#define PSTRAIN_PS_CONN_H

#include <stdint.h>
#include <uv.h>

#include "common/auth.h"
#include "common/tls.h"
#include "proto/wire.h"
#include "ps/net/net.h"
#include "ps/net/push_order.h"
#include "ps/net/rules.h"
#include "ps/ps.h"

typedef enum {
  CONN_AUTH = 0,  /* accepted, proving it holds the cluster secret (common/auth.h) */
  CONN_OPEN,      /* not registered: may send HELLO or STATUS_REQ (small reader) */
  CONN_WORKER,    /* registered worker */
  CONN_CLOSING,   /* uv_close or uv_shutdown under way */
} conn_state;

/* How a delta pull's chunk went (ps_conn.delta_sent); 0 or more: as that many sparse pairs. */
enum { PS_DELTA_FLOAT32 = -2, PS_DELTA_INT8 = -1 };

struct ps_conn {
  /* The connection: its uv_tcp_t is io.tcp (io.tcp.data is this struct), with TLS on it when
   * the ps has a TLS context. Reads, writes, shutdown and close go through the stream. */
  pst_tls_stream io;
  conn_state state;
  ps_server *srv;
  ps_conn *next, *prev;
  pst_reader rd;
  int reader_ready;
  int grow_reader;       /* registered: the reader gets full-size buffers between frames */
  double opened_at;      /* monotonic seconds: --hello-timeout */
  /* The handshake: bytes of the worker's current message, and the state over both. */
  pst_auth auth;
  uint8_t hs[PST_AUTH_HELLO_LEN];
  uint32_t hs_got, hs_need;
  int reading;           /* uv_read_start active */
  int worker;            /* index, or -1 before HELLO */
  uint32_t strikes;      /* messages of this connection rejected (ps_reject): the third
                          * closes it; a later connection on the same slot starts anew */
  char peer[64];
  char session[128];     /* with TLS, once the handshake finished: "TLSv1.3 ..., peer CN=..." */
  double last_rx, last_tx; /* monotonic seconds of the last bytes read and the last frame
                            * queued: silence and heartbeats (ps/train/liveness.c) */
  /* The push in progress: its chunks arrive one at a time into recv, from the top down in
   * ascending runs (push_order.h: ascending, descending, or a layer's chunks at a time). */
  float *recv;           /* [chunk_floats] */
  float *push_dst;       /* where the pending chunk was read: recv, or its place in the sum */
  uint64_t push_version;
  uint32_t push_pos;     /* chunks of the push in progress read so far */
  ps_push_order push_order; /* where it stands in its runs (push_order.h) */
  uint32_t push_chunk;   /* the chunk being read */
  int pending;           /* recv holds chunk pending_chunk, not yet taken */
  int push_dropped;      /* the push in progress is being dropped (late, or rejected) */
  int push_skip;         /* ... after a chunk out of place: its order is unknown, so the rest
                          * is read (when it fits recv) and dropped until its last chunk */
  char push_bad[160];    /* the chunk read into recv is invalid: why ("" when it is not) */
  ps_action frame_act;   /* the table's action for the tensor frame being read (ps/net/rules.h) */
  uint32_t pending_chunk;
  int pending_flags;     /* its place in the push (PST_CHUNK_FIRST, PST_CHUNK_LAST) */
  double push_at, pull_at; /* monotonic seconds: the push's first chunk, the PULL (/metrics) */
  double tl_in_at;       /* the timeline: the pending chunk's last byte in (0: no timeline) */
  /* The round trip (issue 26, ps/obs/metrics.h), ps/net/pull.c's: the ps's work counters (its
   * seconds summing, in the optimizer, sending: rt_w0) when this worker's push began to
   * arrive, and when it was in whole (rt_in, rt_w1); once the first chunk of its next reply
   * is about to be written, the ps's part of the wait (queued and the work since rt_w0),
   * kept (rt_ready) until its next push brings the whole. */
  double rt_in, rt_w0[3], rt_w1[3];
  double rt_queued, rt_work[3];
  int rt_ready;
  /* Pulls: at most one waiting and one being written. */
  int pull_waiting;
  uint64_t pull_want;
  int pull_final;        /* wants the final weights: answered once every worker said BYE */
  int pull_writing;
  pst_store_hold pull_hold; /* the store buffer and version the reply is sent from */
  uint32_t pull_sent;    /* chunks of the reply handed to uv_write (or abandoned) */
  uint32_t pull_done;    /* chunks whose write callback ran (or abandoned) */
  uv_write_t *wreq;      /* [n_chunks]: the write of chunks i.. of a reply uses wreq[i] */
  uint32_t *wbatch;      /* [n_chunks]: how many chunks that write holds */
  uint8_t *whead;        /* [n_chunks * PST_WIRE_CHUNK_HEAD] */
  /* --pull-compress delta (ps/net/pull.c): the weights this worker holds, as it holds them
   * [the shard's floats] (valid when delta_have: a float32 reply made it whole, and no reply
   * since was cut short), and the
   * reply's int8 or sparse chunks [floats + 4 x n_chunks bytes: chunk c at its offset + 4c;
   * a sparse chunk's pairs, at most an eighth of its values, take no more room]. Both
   * come with the first reply; NULL without delta pulls or when they could not be had (every
   * reply is then float32). pull_delta: the PULL allowed a delta; pull_full: this reply is
   * float32. */
  float *delta_ref;
  uint8_t *delta_buf;
  /* [n_chunks]: how this reply's chunk went: PS_DELTA_FLOAT32, PS_DELTA_INT8, or as that
   * many sparse pairs (0 or more). */
  int32_t *delta_sent;
  uint32_t delta_framed; /* this reply's chunks framed so far (in order) */
  int delta_have, pull_delta, pull_full;
  /* Shared memory with a worker on this host (issue 41, proto/ring.h): the worker's region
   * (its pushes' payloads) and this connection's own (the replies'), both mapped at HELLO
   * when the worker offered one (ps/net/messages.c); ring_replies once the worker's PULL says
   * it mapped ours: the replies' payloads then go there (ps/net/pull.c). */
  pst_ring ring;
  int ring_replies;
  uv_shutdown_t shutdown_req;
  /* The I/O threads' jobs (ps/net/io.h): a gradient payload being read into push_dst, and a run
   * of this reply's chunks being written. While rjob is out libuv does not read this socket,
   * and while wjob is out nothing else is written to it: control frames wait in `deferred`,
   * in order, and a graceful close waits for wjob (close_deferred). */
  ps_io_job rjob, wjob;
  uint32_t wjob_chunks;  /* reply chunks in wjob */
  size_t rjob_seen;      /* rjob's progress at the last silence check (ps/train/liveness.c) */
  int close_deferred;
  struct ps_deferred *deferred, *deferred_tail;
  /* STATUS_REQ's rate (ps/net/messages.c): a token bucket, and the requests dropped since the
   * last one answered. */
  double status_tokens, status_at;
  uint32_t status_dropped;
  int yielded;           /* paused after a STATUS: read again on the loop's next turn */
};

/* A control frame written while wjob was out, sent once it ends. */
typedef struct ps_deferred {
  struct ps_deferred *next;
  size_t n;
  uint8_t bytes[];       /* [n] */
} ps_deferred;

/* Reading (ps/net/read.c). */
/* The listener's callback: a new connection, admitted (ps/net/admission.c) and read. */
void ps_conn_accept(uv_stream_t *server, int status);
/* (Again) lets libuv read c: not while it is closing, reading, or an I/O thread reads it. */
void ps_conn_start_reading(ps_conn *c);
/* c stops reading until the loop's next turn, so that every other peer is served between
 * two of its requests (ps/server.c). */
void ps_conn_yield(ps_conn *c);

/* The connection's end (ps/net/conn.c). */
/* Closes c: after its queued writes (an ERROR or SHUTDOWN) have gone out, or at once when
 * `hard` (a peer that stopped reading would hold a graceful close forever). `why` is logged
 * for abnormal closes; NULL for a normal one. A registered worker's close is its loss. */
void ps_conn_close(ps_conn *c, const char *why, int hard);
/* The part of a close that waited for c's write job: the shutdown (or, hard, the close). */
void ps_conn_finish_close(ps_conn *c, int hard);
/* An ERROR saying why, then a hard close (the step watch's stalled worker). */
void ps_conn_drop(ps_conn *c, const char *why);
/* Every registered worker's connection at the watch timer: closed after --worker-timeout of
 * silence (its loss), else sent a HEARTBEAT when the ps has been quiet towards it. */
void ps_conn_watch(ps_server *s, double now);
/* The worker on c says goodbye (BYE leaving, the data handout): its range goes back, it is
 * told SHUTDOWN and its connection closes; a departure, not a loss (ps/net/messages.c). */
void ps_worker_leaves(ps_conn *c);

/* A rate-limited warning about a connection. */
void ps_log_conn(ps_net *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sending (ps/net/send.c). */
/* Sends the control frames that waited behind c's write job, in order. */
void ps_send_deferred(ps_conn *c);
/* Any control header (a HEARTBEAT, a WELCOME, ...). */
int ps_send_header(ps_conn *c, const Pstrain__Header *h);
int ps_send_raw(ps_conn *c, const void *bytes, size_t n);
void ps_send_error(ps_conn *c, const char *reason);
/* SHUTDOWN: training is over (failed: aborted; stopped: stopped on request). */
void ps_send_shutdown(ps_conn *c, const char *reason, int failed, int stopped);

/* Control messages (ps/net/messages.c). */
/* What a peer sends besides its tensors. */
void ps_handle_hello(ps_conn *c, const Pstrain__Hello *hello);
void ps_handle_report(ps_conn *c, const Pstrain__Report *r);
void ps_handle_rollback(ps_conn *c, uint64_t version);
/* A STATUS_REQ: answered within the connection's rate, else dropped, and after too many
 * dropped the connection is closed. Returns 0, or -EPROTO when it was closed. */
int ps_handle_status(ps_conn *c);
/* Admission (ps/net/admission.c). */
/* A new connection: under --max-connections (closing the oldest unregistered one), then
 * waiting for the handshake, or straight to a small reader without a secret. */
int ps_admit(ps_server *s, ps_conn *c);
void ps_auth_buffer(ps_conn *c, char **base, size_t *len);
/* The TLS session failed because the peer spoke in the clear: a pstrain worker without TLS
 * is told why in an ERROR frame, in the clear (the connection is then closed by the caller). */
void ps_refuse_plaintext(ps_conn *c);
/* n more handshake bytes arrived: 0 more to come, 1 authenticated (now CONN_OPEN), < 0 the
 * connection is being closed. */
int ps_auth_read(ps_conn *c, size_t n);
/* Closes connections that did not authenticate or register within --hello-timeout. */
void ps_admission_watch(ps_server *s, double now);
/* A registered worker sent something invalid: counted, logged (rate-limited), and after a
 * few the connection is closed (ps/net/admission.c). */
void ps_reject(ps_conn *c, const char *why);
/* The pull path (ps/net/pull.c). */
/* Whether c's waiting pull may be answered now. */
int ps_pull_ready(ps_server *s, ps_conn *c);
/* Starts the reply to c's waiting pull: a published version at once, or the version being
 * built (sync) chunk by chunk as its chunks become final. */
void ps_pull_answer(ps_conn *c);
/* Sends the chunks of c's reply that became ready since the last call. */
void ps_pull_continue(ps_conn *c);
/* The connection is closing: the chunks of its reply never sent count as done. */
void ps_pull_abandon(ps_conn *c);
/* The round trip's ps side (ps/obs/metrics.h): c's push begins to arrive, its first chunk
 * saying its worker's exposed wait in the step before (wait_us, 0: none), which meets the
 * ps's part of it; and c's push is in whole: its worker waits for weights from here. */
void ps_pull_push_begins(ps_conn *c, uint32_t wait_us);
void ps_pull_wait_begins(ps_conn *c);
/* c's write job ended (taken back by a close): its chunks count as done. */
void ps_pull_job_ended(ps_conn *c);
/* The callback of c's write job: sends what waited behind it, then the rest of the reply. */
void ps_pull_job_done(ps_io_job *j);

/* The timeline (--timeline; ps/net/timeline.c), each a no-op without one: a push chunk's
 * last byte is in; the pending chunk is about to be offered (returns when, 0 when nothing is
 * recorded); it was taken (the wait from its last byte to t_offer, "queued"); reply chunks
 * [first, first + k) went from t0 to t1 on their way out, as `name` says. */
void ps_tl_chunk_in(ps_conn *c);
/* A worker's HEARTBEAT asking for this ps's clock (proto/pstrain.proto, clock_probe): the
 * answer, at once. */
void ps_tl_clock_answer(ps_conn *c, const Pstrain__Header *h);
double ps_tl_offer(ps_conn *c);
void ps_tl_taken(ps_conn *c, double t_offer);
void ps_tl_sent(ps_conn *c, uint32_t first, uint32_t k, double t0, double t1, const char *name);

#endif
