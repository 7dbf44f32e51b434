#include "ps/obs/dashboard.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/shard.h"
#include "proto/status_json.h"
#include "ps/net/net.h"
#include "ps/obs/obs.h"
#include "ps/ps.h"

/* ps/obs/dashboard.html, made a C string by the build (ps/BUILD). */
extern const char ps_dashboard_html[];

static char *status_json(ps_server *s) {
  static ps_status_msg m;
  ps_obs_status(s, &m);
  char addr[300];
  snprintf(addr, sizeof addr, "%s:%d", s->opt.listen_host, s->opt.listen_port);
  cJSON *o = pst_status_json(&m.st, addr);
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "model", s->opt.model_name ? s->opt.model_name : "");
  /* Steps each worker makes over the job, for its progress bar (0 until the data's size is
   * known from the first worker). */
  int spe = s->facts.data_known
                ? pst_steps_per_epoch((int)s->facts.train_n, s->opt.workers, s->opt.batch_size)
                : 0;
  cJSON_AddNumberToObject(o, "worker_steps_total", (double)spe * s->opt.epochs);
  const pst_metrics *mt = &s->obs.metrics;
  cJSON *train = cJSON_AddArrayToObject(o, "train_curve");
  for (int i = 0; train && i < mt->history_n; i++) {
    const pst_train_point *p = &mt->history[i];
    double v[3] = {(double)p->version, p->loss, p->accuracy};
    cJSON_AddItemToArray(train, cJSON_CreateDoubleArray(v, 3));
  }
  cJSON *test = cJSON_AddArrayToObject(o, "test_curve");
  for (int e = 1; test && e <= mt->epochs; e++) {
    const pst_epoch_eval *ev = &mt->evals[e];
    if (!ev->complete || ev->samples == 0) continue;
    double v[4] = {(double)e, (double)ev->version, ev->loss_sum / (double)ev->samples,
                   (double)ev->correct / (double)ev->samples};
    cJSON_AddItemToArray(test, cJSON_CreateDoubleArray(v, 4));
  }
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

int ps_dashboard_handle(void *arg, const char *path, pst_text *body, const char **type) {
  ps_server *s = arg;
  if (!strcmp(path, "/readyz")) {
    /* The loop that answers runs once ps_server_start has listened and loaded any
     * checkpoint; ready until the ps begins to stop (finished, aborted or stopped). */
    int ready = !s->life.stopping && uv_is_active((const uv_handle_t *)&s->net->listener);
    pst_text_printf(body, "%s\n", ready ? "ready" : s->life.stopping ? "stopping" : "not listening");
    return ready ? 200 : 503;
  }
  if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
    pst_text_append(body, ps_dashboard_html, strlen(ps_dashboard_html));
    *type = "text/html; charset=utf-8";
    return 200;
  }
  if (!strcmp(path, "/status.json")) {
    char *text = status_json(s);
    if (!text) return 500;
    pst_text_append(body, text, strlen(text));
    cJSON_free(text);
    *type = "application/json";
    return 200;
  }
  return 404;
}
