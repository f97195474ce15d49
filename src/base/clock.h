/* clock.h - the monotonic clock every timing in hearth reads (stats, timeouts, request logs). */
#ifndef HX_BASE_CLOCK_H
#define HX_BASE_CLOCK_H

/* Milliseconds on CLOCK_MONOTONIC: only differences mean anything. */
double hx_now_ms(void);

#endif
