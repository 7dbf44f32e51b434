/* The table of ps/net/rules.h, and the phase of a connection. */
#include "ps/net/rules.h"

#include <stdio.h>

#include "ps/net/conn.h"
#include "ps/ps.h"

#define H PS_ACT_HANDLE
#define S PS_ACT_STRIKE
#define C PS_ACT_CLOSE
#define I PS_ACT_IGNORE

/* Columns: the message types in Pstrain__MsgType order. The types only a ps sends (WELCOME,
 * WEIGHTS, ACK, STATUS, SHUTDOWN, EVAL, DATA) and MSG_INVALID close the connection everywhere: a
 * peer that sends them is not a worker. ERROR closes it too: its sender closes after it.
 *
 * Why the others are where they are:
 *   - HELLO once, before anything else; a second one closes (a peer that registers twice
 *     on one connection is confused or probing).
 *   - Before HELLO only STATUS_REQ (`pstrain status`) and HEARTBEAT do anything: every
 *     other message needs a worker to count it against, so it closes.
 *   - A worker pulls once at a time: a second PULL while one waits closes (as it always
 *     has). Since issue 41 the PULL may come in the middle of a push: a sync worker that
 *     pushes its first layer's chunks in ascending order sends it after the first of them,
 *     so that the ps streams chunk 0 of the next weights while the rest still arrives.
 *   - After BYE a worker sends no gradient (a PUSH is a strike), says BYE again when it
 *     comes back for the final weights (handled, a no-op), and then pulls them and reports
 *     its evaluation.
 *   - ROLLBACK comes right after registering with every shard, before any exchange: anywhere
 *     else it is a strike.
 *   - REPORT and HEARTBEAT may come between a push's chunks (a worker that pushes each layer
 *     as its backward pass ends sends them from its loop meanwhile). */
static const unsigned char k_rules[PS_PHASE_COUNT][PS_RULE_TYPES] = {
    /*            INV HELLO WELC PULL WGTS PUSH ACK ERR STREQ STAT SHUT REP BYE HB  RB  EVAL DATA */
    [PS_PHASE_AUTH] =     {C, C, C, C, C, C, C, C, C, C, C, C, C, C, C, C, C},
    [PS_PHASE_OPEN] =     {C, H, C, C, C, C, C, C, H, C, C, C, C, H, C, C, C},
    [PS_PHASE_WORKER] =   {C, C, C, H, C, H, C, C, H, C, C, H, H, H, H, C, C},
    [PS_PHASE_PUSHING] =  {C, C, C, H, C, H, C, C, H, C, C, H, S, H, S, C, C},
    [PS_PHASE_PUSHING_PULLED] = {C, C, C, C, C, H, C, C, H, C, C, H, S, H, S, C, C},
    [PS_PHASE_PULLING] =  {C, C, C, C, C, H, C, C, H, C, C, H, H, H, S, C, C},
    [PS_PHASE_FINISHED] = {C, C, C, H, C, S, C, C, H, C, C, H, H, H, S, C, C},
    [PS_PHASE_STOPPING] = {I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I},
};

_Static_assert(PSTRAIN__MSG_TYPE__DATA == PS_RULE_TYPES - 1,
               "one column of the table per message type");

ps_action ps_rule(ps_phase ph, int type) {
  if ((unsigned)ph >= PS_PHASE_COUNT) return PS_ACT_CLOSE;
  if (type < 0 || type >= PS_RULE_TYPES)
    return ph == PS_PHASE_STOPPING ? PS_ACT_IGNORE : PS_ACT_CLOSE;
  return (ps_action)k_rules[ph][type];
}

ps_phase ps_conn_phase(const ps_conn *c) {
  const ps_server *s = c->srv;
  if (c->state == CONN_CLOSING || s->life.stopping) return PS_PHASE_STOPPING;
  if (c->state == CONN_AUTH) return PS_PHASE_AUTH;
  if (c->state != CONN_WORKER || c->worker < 0) return PS_PHASE_OPEN;
  if (c->push_pos > 0 || c->push_dropped || c->push_skip)
    return c->pull_waiting ? PS_PHASE_PUSHING_PULLED : PS_PHASE_PUSHING;
  if (c->pull_waiting) return PS_PHASE_PULLING;
  if (s->roster.workers[c->worker].done) return PS_PHASE_FINISHED;
  return PS_PHASE_WORKER;
}

const char *ps_phase_name(ps_phase ph) {
  static const char *const names[PS_PHASE_COUNT] = {
      "before authentication", "before HELLO", "from a registered worker",
      "in the middle of a push", "in the middle of a push while a PULL waits", "while a PULL waits", "after BYE", "while shutting down"};
  return (unsigned)ph < PS_PHASE_COUNT ? names[ph] : "?";
}

const char *ps_action_name(ps_action a) {
  switch (a) {
    case PS_ACT_HANDLE: return "handle";
    case PS_ACT_STRIKE: return "strike";
    case PS_ACT_CLOSE: return "close";
    case PS_ACT_IGNORE: return "ignore";
  }
  return "?";
}

const char *ps_msg_name(int type, char *buf, unsigned long buflen) {
  static const char *const names[PS_RULE_TYPES] = {
      "MSG_INVALID", "HELLO", "WELCOME", "PULL", "WEIGHTS", "PUSH", "ACK", "ERROR",
      "STATUS_REQ", "STATUS", "SHUTDOWN", "REPORT", "BYE", "HEARTBEAT", "ROLLBACK", "EVAL",
      "DATA"};
  if (type >= 0 && type < PS_RULE_TYPES) return names[type];
  snprintf(buf, buflen, "type %d", type);
  return buf;
}
