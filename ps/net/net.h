/* The connections' part of the ps (struct ps_net), changed only by ps/net/: the listener, every
 * open connection, the I/O threads, what closing a connection must tell the pull path, and the
 * counts the connection layer keeps. ps/server.c sets it up; ps/obs/ reads it. */
#ifndef PSTRAIN_PS_NET_NET_H
#define PSTRAIN_PS_NET_NET_H

#include <stdint.h>
#include <uv.h>

#include "common/log.h"
#include "proto/wire.h"
#include "ps/net/io.h"
#include "ps/net/rules.h"
#include "ps/ps.h"

/* What closing a connection must tell the layer above it: ps/net/conn.c sits below the pull
 * path (ps/net/pull.c) and does not call up into it; ps_server_start wires these to
 * ps_pull_abandon and ps_pull_job_ended. */
typedef struct {
  /* The connection is closing: the chunks of its reply never sent count as done. */
  void (*reply_abandoned)(ps_conn *c);
  /* Its write job was taken back by the close: its chunks count as done. */
  void (*write_job_ended)(ps_conn *c);
} ps_conn_hooks;

struct ps_net {
  uv_tcp_t listener;
  uv_idle_t yield_idle;   /* connections that paused for the loop's next turn (ps/net/read.c) */
  ps_io *io;              /* I/O threads (ps/net/io.h), NULL with --threads 1 or without io_min */
  ps_conn *conns;         /* every open connection, linked */
  int n_conns;
  pst_ratelimit conn_log; /* lines about bad connections (ps_log_conn) */
  /* The push path's frame callbacks (ps/server.c), which every connection's reader is given
   * (ps/net/admission.c). */
  const pst_reader_cbs *frame_cbs;
  ps_conn_hooks hooks;
  uint64_t status_dropped; /* STATUS_REQs past a connection's rate (ps/net/messages.c) */
  uint64_t rejected;       /* invalid messages refused (ps_reject) */
  /* Bytes read on the training port (after TLS) and queued on it (before TLS), all
   * connections; seconds of the loop's and the I/O threads' writing reply chunks. */
  uint64_t bytes_in, bytes_out;
  /* Payload bytes that went through shared memory instead (proto/ring.h): read from the
   * workers' regions, put into the connections' own. */
  uint64_t shm_in, shm_out;
  double send_seconds;
  /* Frames by message type and the action ps/net/rules.h gave them (/metrics). */
  uint64_t frames[PS_RULE_TYPES][PS_ACT_IGNORE + 1];
  /* --pull-compress: each store buffer's weights encoded, chunk by chunk, the first time a
   * reply sends that chunk of that buffer's version (pull_enc_version[b][c]; UINT64_MAX:
   * never), so that every reply of one version shares one encoding pass. A buffer's chunk is
   * never encoded again while a reply sends it: the store lets no step write a held buffer,
   * and a streamed chunk is final. NULL without it (ps/net/pull.c). */
  uint16_t *pull_enc_buf[2];
  uint64_t *pull_enc_version[2];
};

/* Counts a frame of `type` that the table gave action `act` (ps/server.c's reader). */
static inline void ps_net_count_frame(ps_net *n, int type, ps_action act) {
  if (type >= 0 && type < PS_RULE_TYPES) n->frames[type][act]++;
}

/* A share refused as invalid, or one that would have made a chunk non-finite. */
static inline void ps_net_count_rejected(ps_net *n) { n->rejected++; }

#endif
