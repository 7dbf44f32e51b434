/* Free lists for large blocks (128 KiB and more), linked into the harnesses with
 * -Wl,--wrap=malloc,--wrap=realloc,--wrap=free (build.sh).
 *
 * Why: ASan serves a block that large with its own mmap and unmaps it when it leaves
 * quarantine, paging the block's shadow in and out each time; on these virtual machines
 * that was three quarters of a run wherever a run allocates one: a frame reader's 512 KiB
 * unpack arena (wire_reader went from ~1,000 runs/s to ~29,000), the IDX reader's 1 MiB read
 * block and zlib's 256 and 512 KiB buffers (zlib is linked statically so that its calls come
 * here too). A block freed here waits on a list for a request of exactly its size:
 * it stays poisoned meanwhile (a use after free still reports, until it is handed out
 * again), its redzones are ASan's own (an overflow still reports), freeing it twice aborts,
 * and one never freed is still a leak for LeakSanitizer (a list forgets what it hands out).
 * Every other block goes straight to ASan's malloc and free. */
#include <sanitizer/allocator_interface.h>
#include <sanitizer/asan_interface.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

#define LARGE ((size_t)128 << 10) /* from here on ASan mmaps each block */
#define SIZES 16                  /* distinct sizes kept */
#define PER_SIZE 8                /* blocks kept per size */

static struct {
  size_t size;
  int n;
  void *blocks[PER_SIZE];
} lists[SIZES];

static int list_of(size_t n, int make) {
  for (int i = 0; i < SIZES; i++)
    if (lists[i].size == n) return i;
  if (!make) return -1;
  for (int i = 0; i < SIZES; i++)
    if (lists[i].size == 0) {
      lists[i].size = n;
      return i;
    }
  return -1;
}

void *__wrap_malloc(size_t n) {
  int l = n >= LARGE ? list_of(n, 0) : -1;
  if (l >= 0 && lists[l].n > 0) {
    void *p = lists[l].blocks[--lists[l].n];
    lists[l].blocks[lists[l].n] = NULL;
    ASAN_UNPOISON_MEMORY_REGION(p, n);
    return p;
  }
  return __real_malloc(n);
}

void *__wrap_realloc(void *p, size_t n) {
  int l = n >= LARGE ? list_of(n, 0) : -1;
  if (l >= 0 && lists[l].n > 0) {
    void *q = __wrap_malloc(n);
    if (p != NULL) {
      size_t old = __sanitizer_get_allocated_size(p);
      memcpy(q, p, old < n ? old : n);
      __wrap_free(p);
    }
    return q;
  }
  return __real_realloc(p, n);
}

void __wrap_free(void *p) {
  if (p == NULL || !__sanitizer_get_ownership(p)) {
    __real_free(p); /* ASan reports whatever is wrong with it */
    return;
  }
  size_t n = __sanitizer_get_allocated_size(p);
  int l = n >= LARGE ? list_of(n, 1) : -1;
  if (l < 0) {
    __real_free(p);
    return;
  }
  /* A listed block is poisoned from its first byte, and for ASan still allocated: freeing
   * it again would go unseen, so it is looked for. */
  if (__asan_address_is_poisoned(p))
    for (int i = 0; i < lists[l].n; i++)
      if (lists[l].blocks[i] == p) {
        fprintf(stderr, "large_pool: double free of %p (%zu bytes)\n", p, n);
        abort();
      }
  if (lists[l].n == PER_SIZE) {
    __real_free(p);
    return;
  }
  ASAN_POISON_MEMORY_REGION(p, n);
  lists[l].blocks[lists[l].n++] = p;
}
