/* The worker's connection to the ps: resolve, connect with retries and backoff until a
 * deadline, optionally mutual TLS (common/tls.h) and the cluster secret's handshake, then
 * framed messages both ways. Pushes go out zero-copy from the caller's
 * gradient buffer, one frame per chunk, from write requests allocated once. */
#ifndef PSTRAIN_WORKER_CLIENT_H
#define PSTRAIN_WORKER_CLIENT_H

#include <stdint.h>
#include <uv.h>

#include "common/auth.h"
#include "common/codec.h"
#include "common/prom.h"
#include "common/tls.h"
#include "model/model.h"
#include "proto/wire.h"

typedef struct wk_client wk_client;

typedef struct {
  void (*on_connected)(wk_client *c);
  /* Where a WEIGHTS chunk's payload goes (see pst_reader_cbs). */
  int (*on_payload)(wk_client *c, const Pstrain__Header *h, float **dst);
  int (*on_frame)(wk_client *c, const Pstrain__Header *h);
  /* Every queued push write has completed. */
  void (*on_push_sent)(wk_client *c);
  /* The connection failed or ended; `why` says how (NULL: closed by us). After this the
   * client's handles are closed. */
  void (*on_closed)(wk_client *c, const char *why);
} wk_client_cbs;

typedef enum {
  WK_CONN_IDLE = 0,
  WK_CONN_RESOLVING,
  WK_CONN_CONNECTING,
  WK_CONN_BACKOFF,
  WK_CONN_AUTH,      /* connected, proving both ends hold the cluster secret */
  WK_CONN_OPEN,
  WK_CONN_CLOSING,
  WK_CONN_CLOSED,
} wk_conn_state;

struct wk_client {
  uv_loop_t *loop;
  wk_conn_state state;
  const wk_client_cbs *cbs;
  void *data;
  char host[256];
  int port;
  double deadline;        /* monotonic seconds after which connecting gives up */
  int attempts;
  uint64_t backoff_ms;
  int last_attempt; /* the next attempt is the one at the deadline */
  char last_error[128];
  uv_getaddrinfo_t gai;
  int resolving;          /* gai is out: wait for its callback before the client closes */
  uv_connect_t connect_req;
  /* The connection: io.tcp is its uv_tcp_t (io.tcp.data is this struct), with TLS on it when
   * tls is set. A new stream per attempt. */
  pst_tls_stream io;
  int tcp_open;           /* io initialised and not yet closed */
  int timer_open;         /* timer initialised and its close callback not yet run */
  pst_tls_ctx *tls;       /* NULL: plain TCP */
  const char *tls_name;   /* NULL, or the name the ps's certificate must carry */
  char session[128];      /* with TLS, once the handshake finished: "TLSv1.3 ..., peer CN=..." */
  /* The connection ended because the two ends do not trust each other (or the ps does not
   * speak TLS): a configuration error that no reconnection mends. */
  int tls_refused;
  int auth_refused;       /* a ps without a secret refused the handshake */
  int heard;              /* a byte came on this connection */
  int closed_unheard;     /* it closed (EOF, a reset) before any byte came: the ps refused it
                           * at accept (no descriptors, --max-connections) or was stopping */
  uv_timer_t timer;
  pst_reader rd;
  const pst_secret *secret; /* NULL or unset: no handshake */
  pst_auth auth;
  uint8_t hs[PST_AUTH_CHALLENGE_LEN];
  uint32_t hs_got;
  /* Push frames, allocated once the chunk layout is known: chunk i is the floats
   * [starts[i], starts[i + 1]) of the part pushed. */
  uint32_t n_chunks;
  size_t n_floats;
  size_t *starts;         /* [n_chunks + 1] */
  uv_write_t *wreq;       /* [n_chunks] */
  uint8_t *whead;         /* [n_chunks * PST_WIRE_CHUNK_HEAD] */
  uint32_t writes_left;    /* queued push writes not yet completed */
  /* The push in progress: its version and gradient, its direction, and how many of its
   * chunks have been queued (wk_client_push_upto). */
  uint64_t push_version;
  const float *push_grad;
  /* The job's encodings (WELCOME; wk_client_set_encodings). With a push encoding, each chunk
   * is encoded into push_enc_buf as it is queued, and push_resid[n_floats] keeps what
   * rounding lost (error feedback), added to the same value of the next push. */
  pst_enc push_enc, pull_enc;
  double topk_fraction;   /* push_enc TOPK: the share of each chunk sent */
  uint64_t topk_warmup;   /* ... after a warm-up of this many versions (pst_topk_fraction_at) */
  float topk_momentum;    /* > 0: the job's momentum, kept here (pst_topk_encode_momentum) */
  float *push_mom;        /* [n_floats] with topk_momentum: the velocity, zero where sent */
  uint8_t *push_kind;     /* [n_floats] PST_TOPK_* of each value: top-k by tensor (codec.h) */
  uint8_t *push_enc_buf;  /* fp16/bf16: value i at byte 2i; top-k: chunk c's pairs at byte
                           * 4 x starts[c] + 8c (they take at most 4 x its length + 8); int8:
                           * chunk c's scale and bytes at starts[c] + 4c */
  uint32_t *topk_scratch; /* [n_floats]: top-k's selection keys */
  float *push_resid;
  /* --pull-compress delta: a WEIGHTS chunk marked delta lands here [n_floats + 4 bytes], to
   * be added to the weights (pst_int8_add). */
  uint8_t *pull_delta_in;
  /* The push in progress: chunks queued so far; its order. A push goes ascending (chunk 0
   * first) or, begun with wk_client_push_begin, from the top down as the backward pass
   * makes the gradient: to a ps that says push_runs (issue 41) in ascending runs, each the
   * chunks final at one wake-up (run_hi: the lowest chunk of the runs begun; the current
   * run's next chunk and end), so that chunk 0 comes before the rest of the first layer; to
   * an older ps one chunk at a time, the highest first (push_desc). A layer made in rising
   * pieces (wk_client_push_rising) is one run that grows as its pieces are made: run_limit
   * is the end of its chunks final so far (run_end for a run made whole). */
  int push_runs;          /* the ps takes runs and a PULL in a push's middle */
  int push_desc;
  uint32_t push_queued;
  uint32_t run_hi, run_next, run_end, run_limit;
  /* The exposed wait of each step (issue 26): from the last byte of a push handed to the
   * kernel (push_done_at, 0 while none is pending) to the first WEIGHTS frame after it, the
   * next reply's first chunk. wait_us goes to the ps on the next push's first chunk, and
   * waits gathers them for this worker's own figures. */
  double push_done_at;
  int push_timed;         /* push_done_at was set for the push in progress */
  int reply_early;        /* the next reply began before the push in progress had left
                           * (a PULL sent in its middle): its exposed wait is none */
  double pushed_at, reply_at; /* the last push's last byte out, the next reply's first in */
  uint32_t wait_us;
  pst_quant waits;
  /* The timeline (common/timeline.h): each push write's time queued and chunks, by its
   * first chunk ([n_chunks] each; NULL without a timeline), the step the push is of, the
   * WEIGHTS chunk being read's first byte, and this shard's index (the events' ids). */
  double *tl_queued;
  uint32_t *tl_count;
  uint64_t tl_step;
  double tl_chunk_at;
  int tl_shard;
  /* Shared memory with a ps on this host (proto/ring.h, worker/client_ring.c): this
   * connection's regions, the HELLO's offer of ours, whether one may be offered (the owner's
   * --shm; never with TLS), and whether payloads go through them (the ps took ours and we
   * mapped its: pushes go there, PULLs say so, and its replies may come from there). */
  pst_ring ring;
  Pstrain__RingOffer ring_offer;
  int ring_wanted;
  int ring_on;
  double last_rx, last_tx; /* monotonic seconds: the last bytes read, the last frame queued */
  const char *close_why;
  char close_buf[512];   /* a reason naming a host (255) and an error fits whole */
};

/* Connects (retrying until timeout_s), with mutual TLS when `tls` is set (the ps's certificate
 * must then also carry tls_name, when not NULL), authenticates with `secret` when it is set,
 * then calls on_connected. tls and tls_name are the caller's, and must outlive the client. */
int wk_client_start(wk_client *c, uv_loop_t *loop, const char *host, int port,
                    double timeout_s, const pst_secret *secret, pst_tls_ctx *tls,
                    const char *tls_name, const wk_client_cbs *cbs, void *data);
/* Sends a control message (HELLO, PULL, REPORT, BYE). */
int wk_client_send(wk_client *c, const Pstrain__Header *h);
/* Sends a small control message now if the socket takes it at once (an ERROR just before
 * closing, which a queued write would not outlive). */
int wk_client_send_now(wk_client *c, const Pstrain__Header *h);
/* The chunk layout of pushes of the n floats [lo, lo + n) of m's parameter vector, as the
 * WELCOME says: along the layers (layer_chunks: pst_model_chunks) or, from a ps before issue
 * 26, in pieces of chunk_floats (m may then be NULL). 0, -EINVAL for chunk_floats 0, or
 * -ENOMEM. */
int wk_client_prepare_push(wk_client *c, const pst_model *m, size_t lo, size_t n,
                           uint32_t chunk_floats, int layer_chunks);
/* The job's encodings, after wk_client_prepare_push: pushes go out in push (from a buffer
 * of this client's, with error feedback: the residual starts at zero here; top-k with
 * topk_fraction in (0, 0.5], after a warm-up of topk_warmup versions, and with
 * topk_momentum in (0, 1) the momentum kept here, DGC's momentum correction), and WEIGHTS
 * payloads are read in pull (the owner decodes them in place, pst_enc_decode_inplace; with
 * DELTA, chunks marked delta go to pull_delta_in for the owner to add). 0, -EINVAL for an
 * encoding this build does not know or one that is not for that direction, or -ENOMEM. */
int wk_client_set_encodings(wk_client *c, pst_enc push, pst_enc pull, double topk_fraction,
                            uint64_t topk_warmup, float topk_momentum);
/* Queues grad[n] as PUSH chunks computed on `version`; grad must stay untouched until
 * on_push_sent. */
int wk_client_push(wk_client *c, uint64_t version, const float *grad);
/* A push sent in pieces, from the top down, by a worker that sends each layer's gradient as
 * soon as its backward pass has made it: begin names the version and the gradient (grad[n],
 * untouched until on_push_sent); each upto(from) then queues the chunks not yet queued that
 * lie wholly at or above float `from` (in an ascending run to a ps that takes runs, else
 * highest first); upto(0) queues the rest. on_push_sent follows once every chunk has been
 * queued and written. */
int wk_client_push_begin(wk_client *c, uint64_t version, const float *grad);
int wk_client_push_upto(wk_client *c, size_t from);
/* A layer whose gradient is made in rising pieces (kernels/net.h, pst_net_on_grad_part):
 * floats [lo, hi) of this client's part are final, lo the layer's first float. To a ps that
 * takes runs, the layer's chunks go as one run, ascending, each once it is wholly final
 * (its first chunk right away: with the early PULL after it, the ps streams the next
 * weights' chunk 0 while the layer's other pieces are still being computed); the rest of
 * the run when wk_client_push_upto says the layer is final. Nothing to a ps without runs
 * (the layer then goes from the top down when final), or when lo does not begin a chunk of
 * its own. 0 or a negative error. */
int wk_client_push_rising(wk_client *c, size_t lo, size_t hi);
/* As upto(0), but stops after chunk 0 when the push goes in runs and more than chunk 0 is
 * left of its last run: the caller sends its PULL next, then upto(0) the rest, so that the
 * ps answers chunk 0 while the rest still comes (proto: Welcome.push_runs). Returns 1 when it
 * stopped there, 0 when the whole push is queued, or a negative code. */
int wk_client_push_head(wk_client *c);
/* Whether the push in progress goes in runs and has queued its chunk 0 (a rising first
 * layer's first piece): a PULL may follow at once (worker/step.c, wk_pull_ahead). */
int wk_client_head_out(const wk_client *c);
/* Shared memory with a ps on this host (worker/client_ring.c). The offer for this
 * connection's HELLO: its region, created on the first call, or NULL when the client keeps to
 * TCP (ring_wanted unset, TLS, no memfd here). */
const Pstrain__RingOffer *wk_client_ring_offer(wk_client *c);
/* The WELCOME's answer to the offer: with the ps's region mapped too, payloads go through
 * shared memory both ways from now on. Returns 1 then, 0 when the connection keeps to TCP. */
int wk_client_ring_welcome(wk_client *c, const Pstrain__Welcome *w);
/* Closes everything; on_closed(why) follows. */
void wk_client_close(wk_client *c, const char *why);



/* Frees the buffers once the loop has ended (or before a wk_client_start that reconnects:
 * the push layout must then be prepared again). */
void wk_client_free(wk_client *c);

#endif
