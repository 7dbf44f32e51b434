/* What each message may do in each state of a connection: the one table the ps enforces
 * before any handler runs (ps/server.c's reader callbacks ask it for every frame), so that
 * no handler ever runs for a connection that has no worker, or for a message that makes no
 * sense where the connection stands.
 *
 * The phases are derived from the connection (ps/net/conn.h) and the server, never stored:
 *   AUTH      accepted, proving it holds the cluster secret: no frame is read at all
 *   OPEN      authenticated (or no secret), not registered: HELLO or STATUS_REQ
 *   WORKER    registered, between exchanges
 *   PUSHING   registered, the chunks of a push under way
 *   PUSHING_PULLED  the same, with a PULL sent in its middle waiting for its answer
 *   PULLING   registered, a PULL waiting for its answer (for a finished worker: the final one)
 *   FINISHED  registered, said BYE (no more gradients)
 *   STOPPING  the ps is shutting down or this connection is closing
 * When several hold, the first in this order wins: STOPPING, AUTH, OPEN, PUSHING_PULLED,
 * PUSHING, PULLING, FINISHED, WORKER.
 *
 * The actions:
 *   HANDLE    the message's handler runs
 *   STRIKE    nothing changes; counted against the connection's worker (ps/train/validate.c's
 *             ps_reject), and the third strike closes the connection. Only in the phases
 *             that have a worker.
 *   CLOSE     the connection is closed with a short log line (a peer that sends this is not
 *             a pstrain worker, or is lying about where it stands)
 *   IGNORE    the frame is not looked at: the ps or the connection is going anyway */
#ifndef PSTRAIN_PS_RULES_H
#define PSTRAIN_PS_RULES_H

#include "proto/pstrain.pb-c.h"

typedef enum {
  PS_PHASE_AUTH = 0,
  PS_PHASE_OPEN,
  PS_PHASE_WORKER,
  PS_PHASE_PUSHING,
  PS_PHASE_PUSHING_PULLED,
  PS_PHASE_PULLING,
  PS_PHASE_FINISHED,
  PS_PHASE_STOPPING,
  PS_PHASE_COUNT
} ps_phase;

typedef enum { PS_ACT_HANDLE = 0, PS_ACT_STRIKE, PS_ACT_CLOSE, PS_ACT_IGNORE } ps_action;

/* Message types a peer could put in a header: every value of Pstrain__MsgType below this.
 * Anything at or past it (the wire refuses unknown types before this) is closed. */
#define PS_RULE_TYPES 17

struct ps_conn;
/* Where connection c stands now. */
ps_phase ps_conn_phase(const struct ps_conn *c);
/* What a message of `type` may do in phase `ph`. */
ps_action ps_rule(ps_phase ph, int type);

/* The phase as words that follow a message's name in a log line ("PUSH after BYE"). */
const char *ps_phase_name(ps_phase ph);
const char *ps_action_name(ps_action a);
/* "HELLO", "PUSH", ... or "type N". buf is used for the last. */
const char *ps_msg_name(int type, char *buf, unsigned long buflen);

#endif
