/* timer.h — monotonic wall-clock time for measurements. */
#ifndef DJ_CORE_TIMER_H
#define DJ_CORE_TIMER_H

#include <stdint.h>
#include <time.h>

static inline int64_t dj_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
