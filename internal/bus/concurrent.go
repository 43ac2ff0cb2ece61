package bus

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ForEach runs fn for every delivery of batch, at most n at once, each call
// bounded by timeout (0: only by ctx), and returns the results and errors
// aligned with batch. A panic in fn becomes its event's outcome alone
// (ReasonPanic), since a goroutine's panic escapes the runner's recovery.
//
// It is the shape for slow per-event work such as an LLM call: a handler
// first checks its inbox so a redelivered event does not pay twice, calls
// ForEach for the new events, then records every outcome for the batch in
// one short transaction.
func ForEach[T any](ctx context.Context, batch []*Delivery, n int, timeout time.Duration, fn func(context.Context, *Delivery) (T, error)) ([]T, []error) {
	if n <= 0 {
		n = 1
	}
	out := make([]T, len(batch))
	errs := make([]error, len(batch))
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, d := range batch {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for j := i; j < len(batch); j++ {
				errs[j] = ctx.Err()
			}
			wg.Wait()
			return out, errs
		}
		wg.Add(1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					zerolog.Ctx(ctx).Error().Interface("panic", p).Bytes("stack", debug.Stack()).Str("event_id", d.Event.ID()).Msg("handler panic")
					errs[i] = rejectf(ReasonPanic, "handler panicked: %v", p)
				}
				<-sem
				wg.Done()
			}()
			ectx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				ectx, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			out[i], errs[i] = fn(ectx, d)
		}()
	}
	wg.Wait()
	return out, errs
}

// Concurrent adapts a per-event handler to a BatchHandler that handles up
// to n events of a batch at once, each bounded by timeout.
func Concurrent(n int, timeout time.Duration, h HandlerFunc) BatchHandler {
	return func(ctx context.Context, batch []*Delivery) []error {
		_, errs := ForEach(ctx, batch, n, timeout, func(ctx context.Context, d *Delivery) (struct{}, error) {
			return struct{}{}, h(ctx, d)
		})
		return errs
	}
}
