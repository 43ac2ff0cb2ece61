package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runRequests makes n requests with conc clients in flight and returns
// their latency. Failed requests are counted, not timed; when all fail,
// the first error is returned.
func runRequests(ctx context.Context, n, conc int, do func(context.Context, int) error) (Latency, error) {
	rec := newRecorder(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				rec.run(ctx, i, time.Now(), do)
			}
		}()
	}
	wg.Wait()
	return rec.summary(ctx, time.Since(start))
}

// runAtRate makes n requests at rate per second in an open loop: request
// i is due at i/rate and starts then, however many are still waiting for
// their answers, and is timed from when it was due, so a slow answer
// neither delays the requests after it nor hides their wait (no
// coordinated omission). Failed requests are counted, not timed.
func runAtRate(ctx context.Context, n int, rate float64, do func(context.Context, int) error) (Latency, error) {
	if rate <= 0 {
		return Latency{}, fmt.Errorf("open loop: rate %g", rate)
	}
	rec := newRecorder(n)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec.run(ctx, i, due, do)
		}()
	}
	wg.Wait()
	return rec.summary(ctx, time.Since(start))
}

// recorder keeps the outcome of n requests, each written by one goroutine.
type recorder struct {
	lat      []time.Duration
	ok       []bool
	errs     atomic.Int64
	once     sync.Once
	firstErr error
}

func newRecorder(n int) *recorder {
	return &recorder{lat: make([]time.Duration, n), ok: make([]bool, n)}
}

// run makes request i and records its latency from since.
func (r *recorder) run(ctx context.Context, i int, since time.Time, do func(context.Context, int) error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := do(rctx, i)
	r.lat[i] = time.Since(since)
	if err != nil {
		r.errs.Add(1)
		r.once.Do(func() { r.firstErr = err })
		return
	}
	r.ok[i] = true
}

// summary turns the latencies of the requests that succeeded into a
// Latency; when all failed, it returns the first error.
func (r *recorder) summary(ctx context.Context, wall time.Duration) (Latency, error) {
	if err := ctx.Err(); err != nil {
		return Latency{}, err
	}
	var good []time.Duration
	for i, d := range r.lat {
		if r.ok[i] {
			good = append(good, d)
		}
	}
	if len(good) == 0 {
		return Latency{}, r.firstErr
	}
	slices.Sort(good)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{
		Requests: len(good), Errors: int(r.errs.Load()),
		P50: ms(good[len(good)/2]), P99: ms(good[min(len(good)-1, len(good)*99/100)]), Max: ms(good[len(good)-1]),
		Rate: float64(len(good)) / wall.Seconds(),
	}, nil
}

// medianLatency is the field-wise median of rounds; errors add up.
func medianLatency(ls []Latency) Latency {
	pick := func(f func(Latency) float64) float64 {
		xs := make([]float64, len(ls))
		for i, l := range ls {
			xs[i] = f(l)
		}
		return median(xs)
	}
	out := Latency{
		P50:  pick(func(l Latency) float64 { return l.P50 }),
		P99:  pick(func(l Latency) float64 { return l.P99 }),
		Max:  pick(func(l Latency) float64 { return l.Max }),
		Rate: pick(func(l Latency) float64 { return l.Rate }),
	}
	for _, l := range ls {
		out.Requests += l.Requests
		out.Errors += l.Errors
	}
	out.Requests /= max(1, len(ls))
	return out
}
