package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// connect returns a client of tenant on the shared server (or at cfg.URL),
// closed at cleanup.
func connect(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = natsURL
	}
	c, err := client.Connect(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// proxied returns a proxy in front of the shared server, which a test can
// take down to cut its clients off while agentq keeps running, and
// options that make a client reconnect quickly.
func proxied(t *testing.T) (*testenv.Proxy, []nats.Option) {
	t.Helper()
	u, err := url.Parse(natsURL)
	require.NoError(t, err)
	p := testenv.StartProxy(t, u.Host)
	return p, []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)}
}

// answer publishes ev through c and returns the indexer's answer to it
// (prompt.indexed, tool.indexed or indexer.rejected): its type and data.
func answer(t *testing.T, c *client.Client, ev client.Event) (string, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan *nats.Msg, 16)
	var subs []*nats.Subscription
	for _, s := range []string{"prompt.indexed.", "tool.indexed.", "indexer.rejected."} {
		sub, err := c.Conn().ChanSubscribe(s+c.Tenant(), got)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	p, err := c.Publish(ctx, ev)
	require.NoError(t, err)
	_, err = p.Wait(ctx)
	require.NoError(t, err)
	for {
		select {
		case m := <-got:
			res, err := bus.Decode(m.Header, m.Data)
			require.NoError(t, err)
			if bus.Causation(res) != p.ID {
				continue
			}
			var data map[string]any
			require.NoError(t, json.Unmarshal(res.Data(), &data))
			return res.Type(), data
		case <-ctx.Done():
			t.Fatalf("no answer from the indexer to %s %s", p.Type, p.ID)
		}
	}
}

// indexed publishes ev and fails unless the indexer stored it.
func indexed(t *testing.T, c *client.Client, ev client.Event) map[string]any {
	t.Helper()
	typ, data := answer(t, c, ev)
	require.NotEqual(t, "agentq.indexer.rejected.v1", typ, "rejected: %v", data)
	return data
}

// version returns the version GetPrompt serves, failing on an error.
func version(t *testing.T, c *client.Client, id string, opts ...client.GetOption) int {
	t.Helper()
	got, err := c.GetPrompt(context.Background(), id, opts...)
	require.NoError(t, err)
	return got.Prompt.Version
}

// gate forwards connections to the shared server and can hold back what
// the server sends (acks, replies) while the connections stay up, so a
// test can keep acks from arriving without the client noticing a
// disconnect.
type gate struct {
	addr string
	mu   sync.Mutex
	cond *sync.Cond
	shut bool
}

func startGate(t *testing.T) *gate {
	t.Helper()
	u, err := url.Parse(natsURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{addr: ln.Addr().String()}
	g.cond = sync.NewCond(&g.mu)
	var conns []net.Conn
	var cmu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, up)
			cmu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, g.reader(up)); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		g.Open()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
	})
	return g
}

// URL is the gate's NATS URL.
func (g *gate) URL() string { return "nats://" + g.addr }

// Shut holds back what the server sends from now on.
func (g *gate) Shut() { g.mu.Lock(); g.shut = true; g.mu.Unlock() }

// Open lets it through again.
func (g *gate) Open() { g.mu.Lock(); g.shut = false; g.cond.Broadcast(); g.mu.Unlock() }

func (g *gate) reader(r io.Reader) io.Reader { return gatedReader{g, r} }

type gatedReader struct {
	g *gate
	r io.Reader
}

func (gr gatedReader) Read(p []byte) (int, error) {
	n, err := gr.r.Read(p)
	gr.g.mu.Lock()
	for gr.g.shut {
		gr.g.cond.Wait()
	}
	gr.g.mu.Unlock()
	return n, err
}
