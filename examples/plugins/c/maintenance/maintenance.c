// Maintenance: keeps pods off nodes that are in a maintenance window.
//
// Operators label a node `maintenance.example.com/window` with `active` while it is being worked
// on (or `scheduled` shortly before); such nodes are filtered out. A pod that must run there anyway
// (the maintenance tooling itself) carries the annotation `maintenance.example.com/allow: "true"`.
// Configuration (optional), in the scheduler's TOML:
//
//   [plugins.Maintenance]
//   component = "maintenance.wasm"
//   config = { label = "maintenance.example.com/window" }
//
// Built with clang for wasm32-wasi against bindings from `wit-bindgen c`, then made a component
// (`wasched plugin build` runs every step). The exports own their arguments: each frees them.

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#define ALLOW_ANNOTATION "maintenance.example.com/allow"
#define REASON "node(s) were in a maintenance window"

static char *window_label;
// in_window[id]: the node with that id is in a maintenance window.
static bool *in_window;
static size_t in_window_len;
static bool pod_allowed;

static bool equals(const plugin_string_t *s, const char *text) {
  size_t len = strlen(text);
  return s->len == len && memcmp(s->ptr, text, len) == 0;
}

// The value of "label" in a JSON object such as {"label": "x"}; NULL when absent. Enough for this
// plugin's one-field configuration: escapes are not supported and are refused.
static char *json_label(const plugin_string_t *config, const char **error) {
  const char *text = (const char *)config->ptr;
  size_t len = config->len;
  const char *key = "\"label\"";
  size_t key_len = strlen(key);
  for (size_t i = 0; i + key_len <= len; i++) {
    if (memcmp(text + i, key, key_len) != 0) continue;
    size_t j = i + key_len;
    while (j < len && (text[j] == ' ' || text[j] == ':')) j++;
    if (j >= len || text[j] != '"') {
      *error = "Maintenance config: label must be a string";
      return NULL;
    }
    size_t start = ++j;
    while (j < len && text[j] != '"' && text[j] != '\\') j++;
    if (j >= len || text[j] != '"' || j == start) {
      *error = "Maintenance config: label must be a non-empty string without escapes";
      return NULL;
    }
    char *value = malloc(j - start + 1);
    memcpy(value, text + start, j - start);
    value[j - start] = '\0';
    return value;
  }
  return NULL;
}

bool exports_plugin_init(plugin_string_t *config, plugin_descriptor_t *ret, plugin_string_t *err) {
  const char *error = NULL;
  char *label = json_label(config, &error);
  plugin_string_free(config);
  if (error != NULL) {
    plugin_string_dup(err, error);
    return false;
  }
  window_label = label != NULL ? label : strdup("maintenance.example.com/window");
  plugin_string_dup(&ret->name, "Maintenance");
  plugin_string_dup(&ret->version, "1.0.0");
  ret->filter = true;
  ret->score = false;
  ret->normalize = WASCHED_PLUGIN_TYPES_NORMALIZE_KIND_NONE;
  ret->reads_usage = false;
  // The host sends only the parts of the pod named here; the others arrive with is_some false.
  ret->reads_pod = WASCHED_PLUGIN_TYPES_POD_PARTS_ANNOTATIONS;
  return true;
}

static void set_in_window(uint32_t id, bool value) {
  if (id >= in_window_len) {
    size_t len = in_window_len == 0 ? 1024 : in_window_len;
    while (len <= id) len *= 2;
    in_window = realloc(in_window, len * sizeof(bool));
    memset(in_window + in_window_len, 0, (len - in_window_len) * sizeof(bool));
    in_window_len = len;
  }
  in_window[id] = value;
}

void exports_plugin_upsert_nodes(plugin_list_tuple2_node_id_node_info_t *nodes) {
  for (size_t i = 0; i < nodes->len; i++) {
    const plugin_node_info_t *node = &nodes->ptr[i].f1;
    bool window = false;
    for (size_t l = 0; l < node->labels.len; l++) {
      const plugin_tuple2_string_string_t *label = &node->labels.ptr[l];
      if (equals(&label->f0, window_label)) {
        window = equals(&label->f1, "active") || equals(&label->f1, "scheduled");
      }
    }
    set_in_window(nodes->ptr[i].f0, window);
  }
  plugin_list_tuple2_node_id_node_info_free(nodes);
}

void exports_plugin_remove_nodes(plugin_list_node_id_t *ids) {
  for (size_t i = 0; i < ids->len; i++) {
    if (ids->ptr[i] < in_window_len) in_window[ids->ptr[i]] = false;
  }
  plugin_list_node_id_free(ids);
}

void exports_plugin_update_usage(plugin_list_tuple2_node_id_node_usage_t *usage) {
  plugin_list_tuple2_node_id_node_usage_free(usage);
}

void exports_plugin_set_pod(plugin_pod_t *pod, plugin_pod_plan_t *ret) {
  pod_allowed = false;
  for (size_t i = 0; pod->annotations.is_some && i < pod->annotations.val.len; i++) {
    const plugin_tuple2_string_string_t *a = &pod->annotations.val.ptr[i];
    if (equals(&a->f0, ALLOW_ANNOTATION) && equals(&a->f1, "true")) pod_allowed = true;
  }
  plugin_pod_free(pod);
  ret->filter.tag = pod_allowed ? WASCHED_PLUGIN_TYPES_FILTER_PLAN_SKIP
                                : WASCHED_PLUGIN_TYPES_FILTER_PLAN_RUN;
  ret->score = false;
}

void exports_plugin_filter(plugin_list_node_id_t *nodes, plugin_filter_results_t *ret) {
  bool any = false;
  ret->verdicts.len = nodes->len;
  ret->verdicts.ptr = malloc(nodes->len * sizeof(uint32_t) + 1);
  for (size_t i = 0; i < nodes->len; i++) {
    uint32_t id = nodes->ptr[i];
    bool blocked = !pod_allowed && id < in_window_len && in_window[id];
    ret->verdicts.ptr[i] = blocked ? 1 : 0;
    any = any || blocked;
  }
  plugin_list_node_id_free(nodes);
  ret->failures.len = 0;
  ret->failures.ptr = NULL;
  if (any) {
    wasched_plugin_types_failure_t *failure = malloc(sizeof(*failure));
    failure->code = WASCHED_PLUGIN_TYPES_CODE_UNSCHEDULABLE_AND_UNRESOLVABLE;
    failure->reasons.len = 1;
    failure->reasons.ptr = malloc(sizeof(plugin_string_t));
    plugin_string_dup(&failure->reasons.ptr[0], REASON);
    ret->failures.ptr = failure;
    ret->failures.len = 1;
  }
}

void exports_plugin_score(plugin_list_node_id_t *nodes, plugin_list_s64_t *ret) {
  ret->len = nodes->len;
  ret->ptr = calloc(nodes->len + 1, sizeof(int64_t));
  plugin_list_node_id_free(nodes);
}

void exports_plugin_normalize(plugin_list_s64_t *scores, plugin_list_s64_t *ret) {
  *ret = *scores;
}
