package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// With Lanes 2 a second batch reaches the handler while the first is still
// in it, every event is handled exactly once, and a stop ends both lanes.
// With one lane the first batch would hold the second back: the handler
// below only returns once two calls are in it at the same time.
func TestRunnerLanesHandleBatchesAtOnce(t *testing.T) {
	cases := []struct {
		lanes   int
		overlap bool
	}{{lanes: 1, overlap: false}, {lanes: 2, overlap: true}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("lanes=%d", tc.lanes), func(t *testing.T) {
			n := testenv.StartNATS(t)
			var (
				mu      sync.Mutex
				inside  int
				most    int
				handled = map[string]int{}
			)
			both := make(chan struct{})
			var bothOnce sync.Once
			h := func(ctx context.Context, batch []*bus.Delivery) []error {
				mu.Lock()
				inside++
				most = max(most, inside)
				if inside == 2 {
					bothOnce.Do(func() { close(both) })
				}
				mu.Unlock()
				// Wait for a second batch in the handler, or give up after a
				// while: with one lane it never comes.
				select {
				case <-both:
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
				}
				mu.Lock()
				inside--
				for _, d := range batch {
					var data struct {
						ToolName string `json:"tool_name"`
					}
					require.NoError(t, json.Unmarshal(d.Event.Data(), &data))
					handled[data.ToolName]++
				}
				mu.Unlock()
				return make([]error, len(batch))
			}
			const events = 40
			for i := range events {
				publish(t, n.JS, toolMsg(t, "acme", fmt.Sprintf("tool_%d", i)))
			}
			stop := startRunner(t, n, h, bus.RunnerOptions{Consumer: "lanes", BatchSize: 5, Lanes: tc.lanes})
			testenv.Eventually(t, 20*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(handled) == events
			}, "every event handled")
			stop()
			mu.Lock()
			defer mu.Unlock()
			for name, c := range handled {
				require.Equal(t, 1, c, "%s handled once", name)
			}
			require.Equal(t, tc.overlap, most >= 2, "batches in the handler at once: %d", most)
			cons, err := n.JS.Consumer(context.Background(), bus.StreamName, "lanes")
			require.NoError(t, err)
			testenv.Eventually(t, 5*time.Second, func() bool {
				info, err := cons.Info(context.Background())
				return err == nil && info.NumAckPending == 0 && info.NumPending == 0
			}, "every event acked, nothing left pending")
			require.Empty(t, testenv.DeadLetters(t, n.JS))
		})
	}
}
