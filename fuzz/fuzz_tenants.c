/* fuzz_tenants.c - the server's tenants file (srv_tenants_parse): a file
 * that parses has 1 to 64 tenants, each found by its own key; a file that
 * does not leaves nothing allocated. Quotas are taken and given back on
 * every tenant. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  srv_t s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.lock, NULL);
  if (!srv_tenants_parse(&s, (const char *)data, size, "fuzz.json")) {
    if (s.tenants || s.admin_key || s.n_tenants < 0) {
      fprintf(stderr, "fuzz_tenants: a refused file left state behind\n");
      abort();
    }
    pthread_mutex_destroy(&s.lock);
    return 0;
  }
  if (s.n_tenants < 1 || s.n_tenants > 64 || !s.tenants) abort();
  for (int i = 0; i < s.n_tenants; i++) {
    srv_tenant_t *t = &s.tenants[i];
    if (!t->name || !*t->name || !t->key || strlen(t->key) < 8 || t->index != i) abort();
    if (srv_tenant_by_key(&s, t->key) != t) {
      fprintf(stderr, "fuzz_tenants: tenant %d is not found by its key\n", i);
      abort();
    }
    int retry = 0;
    const char *reason = NULL;
    pthread_mutex_lock(&s.lock);
    if (srv_quota_take(&s, t, 100, &retry, &reason)) srv_quota_release(&s, t, 50);
    else if (!reason || retry < 0) abort();
    pthread_mutex_unlock(&s.lock);
  }
  if (srv_tenant_by_key(&s, NULL) || srv_tenant_by_key(&s, "")) abort();
  srv_tenants_free(&s);
  free(s.admin_key);
  pthread_mutex_destroy(&s.lock);
  return 0;
}
