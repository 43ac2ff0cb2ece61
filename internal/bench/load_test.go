package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The closed loop counts failed requests without timing them; when every
// request fails, it returns the first error.
func TestRunRequests(t *testing.T) {
	ctx := context.Background()
	l, err := runRequests(ctx, 20, 4, func(_ context.Context, i int) error {
		if i%5 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 16, l.Requests)
	require.Equal(t, 4, l.Errors)
	require.LessOrEqual(t, l.P50, l.P99)
	require.LessOrEqual(t, l.P99, l.Max)
	require.Positive(t, l.Rate)

	_, err = runRequests(ctx, 3, 2, func(context.Context, int) error { return errors.New("down") })
	require.EqualError(t, err, "down")
}

// The open loop starts each request when it is due, however many are still
// waiting for their answers: request 0 is answered only once request 2 has
// started, which a closed loop of one client could never do, and its
// latency includes that wait.
func TestRunAtRateDoesNotWaitForAnswers(t *testing.T) {
	const n, rate = 3, 100.0 // a request every 10 ms
	started2 := make(chan struct{})
	l, err := runAtRate(context.Background(), n, rate, func(ctx context.Context, i int) error {
		switch i {
		case 0:
			select {
			case <-started2:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case 2:
			close(started2)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, n, l.Requests)
	require.Zero(t, l.Errors)
	interval := time.Duration(float64(time.Second) / rate)
	require.GreaterOrEqual(t, l.Max, float64((n-1)*interval)/float64(time.Millisecond), "request 0 waited for request 2's start")
	// The last request leaves no earlier than (n-1) intervals in.
	require.LessOrEqual(t, l.Rate, float64(n)/((n-1)*interval).Seconds())

	_, err = runAtRate(context.Background(), 1, 0, func(context.Context, int) error { return nil })
	require.Error(t, err)
}

// Rounds are summarised field by field: medians of the percentiles and
// rates, errors summed, requests per round.
func TestMedianLatency(t *testing.T) {
	got := medianLatency([]Latency{
		{Requests: 10, Errors: 1, P50: 3, P99: 9, Max: 30, Rate: 100},
		{Requests: 10, Errors: 0, P50: 1, P99: 7, Max: 10, Rate: 300},
		{Requests: 10, Errors: 2, P50: 2, P99: 8, Max: 20, Rate: 200},
	})
	require.Equal(t, Latency{Requests: 10, Errors: 3, P50: 2, P99: 8, Max: 20, Rate: 200}, got)
}
