package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

// Handlers that ignore their context and never return hold every slot:
// the requests behind them are still answered, overloaded at once or
// timeout at their deadline, never left to the client's own timeout.
func TestStuckHandlersNeverSilenceOthers(t *testing.T) {
	env := testenv.StartNATS(t)
	const slots, timeout = 2, time.Second
	release := make(chan struct{})
	var once sync.Once
	var running atomic.Int64
	s := startService(t, env.NC, service.Options{Name: "stuck", Concurrency: slots, Timeout: timeout})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	require.NoError(t, s.AddEndpoint("get", "test.stuck", "", func(_ context.Context, r service.Request) (any, error) {
		if r.Tenant == "hostile" {
			running.Add(1)
			<-release
		}
		return echoReply{Tenant: r.Tenant, Query: "ok"}, nil
	}))
	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)

	call := func(tenant string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := service.Call(ctx, client, "test.stuck."+tenant, echoRequest{Query: "q"}, nil)
		return time.Since(start), err
	}
	hostile := make(chan error, slots)
	for range slots {
		go func() { _, err := call("hostile"); hostile <- err }()
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return running.Load() == slots }, "%d hostile handlers running", running.Load())

	const others = 12
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, others)
	for range others {
		go func() { d, err := call("victim"); results <- result{d, err} }()
	}
	codes := map[string]int{}
	for range others {
		r := <-results
		var se *service.Error
		require.True(t, errors.As(r.err, &se), "no error reply after %s: %v", r.took, r.err)
		codes[se.Code]++
		switch se.Code {
		case service.CodeOverloaded:
			require.Less(t, r.took, timeout, "overloaded is answered at once")
		case service.CodeTimeout:
			require.Less(t, r.took, timeout+time.Second)
		default:
			t.Fatalf("code %s", se.Code)
		}
	}
	require.Positive(t, codes[service.CodeOverloaded], "%v", codes)
	for range slots {
		var se *service.Error
		require.True(t, errors.As(<-hostile, &se))
		require.Equal(t, service.CodeTimeout, se.Code)
	}
	once.Do(func() { close(release) })
	// Once the handlers return, the endpoint serves again.
	testenv.Eventually(t, 5*time.Second, func() bool { _, err := call("victim"); return err == nil }, "served again")
}

// A reply larger than the server's max payload cannot be sent: the client
// gets an error reply instead of waiting for its own timeout.
func TestOversizedReplyIsAnError(t *testing.T) {
	env := testenv.StartNATS(t)
	s := startService(t, env.NC, service.Options{Name: "big", Timeout: 5 * time.Second})
	big := strings.Repeat("x", int(env.NC.MaxPayload())+1)
	require.NoError(t, s.AddEndpoint("get", "test.big", "", func(_ context.Context, r service.Request) (any, error) {
		return echoReply{Tenant: r.Tenant, Query: big}, nil
	}))
	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = service.Call(ctx, client, "test.big.acme", echoRequest{Query: "q"}, nil)
	var se *service.Error
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, service.CodeTooLarge, se.Code)
	require.Contains(t, se.Message, "bytes")
}
