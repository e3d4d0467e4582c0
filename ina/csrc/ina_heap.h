/* A binary min-heap over an array, for the native cores' timers (header-only).
 *
 * INA_HEAP(name, type, before) defines, for `type` elements ordered by `before(const type *a,
 * const type *b)` (a strictly first):
 *   name_sift_down(heap, count, i)  restore the order below position i;
 *   name_push(heap, &count, item)   add an item (the caller made room for it);
 *   name_pop(heap, &count)          drop the first item;
 *   name_build(heap, count)         order an array of any items (after a compaction).
 * Growth and what counts as a stale item are the caller's.
 */
#ifndef INA_HEAP_H
#define INA_HEAP_H

#include <stddef.h>

#define INA_HEAP(name, type, before)                                                   \
    static inline void name##_sift_down(type *heap, size_t count, size_t i) {          \
        type moving = heap[i];                                                         \
        for (;;) {                                                                     \
            size_t child = 2 * i + 1;                                                  \
            if (child >= count) break;                                                 \
            if (child + 1 < count && before(&heap[child + 1], &heap[child])) child++;  \
            if (!before(&heap[child], &moving)) break;                                 \
            heap[i] = heap[child], i = child;                                          \
        }                                                                              \
        heap[i] = moving;                                                              \
    }                                                                                  \
    static inline void name##_push(type *heap, size_t *count, type item) {             \
        size_t i = (*count)++;                                                         \
        while (i > 0 && before(&item, &heap[(i - 1) / 2])) {                           \
            heap[i] = heap[(i - 1) / 2];                                               \
            i = (i - 1) / 2;                                                           \
        }                                                                              \
        heap[i] = item;                                                                \
    }                                                                                  \
    static inline void name##_pop(type *heap, size_t *count) {                         \
        heap[0] = heap[--*count];                                                      \
        if (*count) name##_sift_down(heap, *count, 0);                                 \
    }                                                                                  \
    static inline void name##_build(type *heap, size_t count) {                        \
        for (size_t i = count / 2; i-- > 0;) name##_sift_down(heap, count, i);         \
    }

#endif
