package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJobsWork checks the suite's own stand-in for slow work: a step not
// held returns its output at once, a held one waits for its release or is
// interrupted by its context, with the cause, and every execution counts.
func TestJobsWork(t *testing.T) {
	var w JobWork
	out, err := w.Do(context.Background(), "t1", "j1", 0)
	require.NoError(t, err)
	require.Equal(t, jobOutput("t1", "j1", 0), out)

	w.hold("t1", "j1", 1)
	type ret struct {
		out string
		err error
	}
	done := make(chan ret, 1)
	go func() {
		out, err := w.Do(context.Background(), "t1", "j1", 1)
		done <- ret{out, err}
	}()
	require.Eventually(t, func() bool { return w.stats("t1", "j1", 1).started == 1 }, 10*time.Second, 10*time.Millisecond)
	select {
	case <-done:
		t.Fatal("a held step returned before its release")
	case <-time.After(50 * time.Millisecond): // the absence of a return, over a short while
	}
	stop := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	_, err = w.Do(ctx, "t1", "j1", 1)
	require.ErrorIs(t, err, stop)
	w.release("t1", "j1", 1)
	require.Equal(t, ret{jobOutput("t1", "j1", 1), nil}, <-done)

	s := w.stats("t1", "j1", 1)
	require.Equal(t, 2, s.started)
	require.Equal(t, 1, s.returned)
	require.Equal(t, 1, s.interrupted)
	require.False(t, s.interruptedAt.IsZero())
	require.Equal(t, jobStepRuns{started: 1, returned: 1}, w.stats("t1", "j1", 0))
	require.NotEqual(t, jobOutput("t1", "j1", 0), jobOutput("t2", "j1", 0), "outputs differ by tenant")
}
