package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
)

// ClientOptions configure Client.
type ClientOptions struct {
	Requests int           // GetPrompt calls per hit and miss measurement
	Cold     int           // prompt ids each fetched once: misses the indexer answers from the database
	Clients  int           // connected clients during label moves
	Moves    int           // label moves
	Poll     time.Duration // how often each client calls GetPrompt while a move is under way
}

// ClientResult is what agentq bench client measured.
type ClientResult struct {
	Database string
	Requests int
	// Hit: GetPrompt answered from the client's cache, rendered with
	// params; its anchor, Render, is the same rendering alone.
	HitP50, HitP99       time.Duration
	RenderP50, RenderP99 time.Duration
	// Miss: GetPrompt with the cache off, answered by the indexer from its
	// memory; its anchor, Request, is a bare NATS request/reply of the
	// same size on the same server. Cold: the first GetPrompt of an id,
	// which the indexer reads from the database.
	MissP50, MissP99       time.Duration
	RequestP50, RequestP99 time.Duration
	Cold                   int
	ColdP50, ColdP99       time.Duration
	// Label moves: from the prompt.indexed result (as a plain subscriber
	// hears it) until each client's GetPrompt returns the new version;
	// Publish: from publishing prompt.activated. Anchor: one core NATS
	// message fanned out to as many plain connections, each answering
	// with a bare request/reply.
	Clients, Moves                  int
	Poll                            time.Duration
	MoveP50, MoveP99, MoveMax       time.Duration
	PublishP50, PublishP99          time.Duration
	FanoutP50, FanoutP99, FanoutMax time.Duration
}

// Print writes r as the lines `agentq bench client` prints.
func (r ClientResult) Print(w io.Writer) {
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f×", float64(a)/float64(b))
	}
	fmt.Fprintf(w, "Go client (%s), %d gets per measurement\n", r.Database, r.Requests)
	fmt.Fprintf(w, "  GetPrompt, cache hit, rendered           p50 %7.3f ms  p99 %7.3f ms\n", ms(r.HitP50), ms(r.HitP99))
	fmt.Fprintf(w, "    anchor: the rendering alone            p50 %7.3f ms  p99 %7.3f ms  (hit p99 %s)\n", ms(r.RenderP50), ms(r.RenderP99), ratio(r.HitP99, r.RenderP99))
	fmt.Fprintf(w, "  GetPrompt, miss (indexer's memory)       p50 %7.3f ms  p99 %7.3f ms\n", ms(r.MissP50), ms(r.MissP99))
	fmt.Fprintf(w, "    anchor: bare NATS request/reply        p50 %7.3f ms  p99 %7.3f ms  (miss p99 %s)\n", ms(r.RequestP50), ms(r.RequestP99), ratio(r.MissP99, r.RequestP99))
	fmt.Fprintf(w, "  GetPrompt, first get of %4d ids (db)    p50 %7.3f ms  p99 %7.3f ms\n", r.Cold, ms(r.ColdP50), ms(r.ColdP99))
	fmt.Fprintf(w, "label moves: %d, each to %d connected clients polling every %s\n", r.Moves, r.Clients, r.Poll)
	fmt.Fprintf(w, "  prompt.indexed → every client serves it  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", ms(r.MoveP50), ms(r.MoveP99), ms(r.MoveMax))
	fmt.Fprintf(w, "  prompt.activated published → served      p50 %7.2f ms  p99 %7.2f ms\n", ms(r.PublishP50), ms(r.PublishP99))
	fmt.Fprintf(w, "    anchor: fan-out + bare request/reply   p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  (move p99 %s)\n", ms(r.FanoutP50), ms(r.FanoutP99), ms(r.FanoutMax), ratio(r.MoveP99, r.FanoutP99))
}

// clientBenchPrompt is the prompt every measurement gets.
const clientBenchPrompt = `You are a support agent for {{.Product}}. Answer the customer's question
using only the knowledge base articles you are given. Be {{.Tone}}.
If the articles do not answer it, say so and point to {{.Escalation}}.`

var clientBenchParams = []client.Param{
	{Name: "Product", Type: "string", Required: true},
	{Name: "Tone", Type: "string", Default: "friendly and concise"},
	{Name: "Escalation", Type: "string", Default: "support@example.com"},
}

// Client measures the Go client's GetPrompt and how fast a label move
// reaches connected clients, on an embedded NATS server, an indexer in
// process and cfg's database (the PGlite dev database when none is set).
func Client(ctx context.Context, cfg config.Config, o ClientOptions, progress io.Writer, log zerolog.Logger) (ClientResult, error) {
	res := ClientResult{Database: "AGENTQ_DATABASE_URL", Requests: o.Requests, Cold: o.Cold, Clients: o.Clients, Moves: o.Moves, Poll: o.Poll}
	say := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	cfg, pglite, stop, err := embedded(ctx, cfg)
	defer stop()
	if err != nil {
		return res, err
	}
	if pglite {
		res.Database = "PGlite dev database (measure on native Postgres for production figures)"
	}
	d, err := app.Start(ctx, cfg, "bench", log.Level(zerolog.WarnLevel))
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- app.Run(rctx, d, indexer.Consumer) }()
	defer func() { cancel(); <-runDone }()

	tenant := fmt.Sprintf("bench-client-%x", rand.Uint32())
	connect := func(size int) (*client.Client, error) {
		return client.Connect(ctx, client.Config{URL: cfg.NATSURL, Tenant: tenant, CacheSize: size, Source: "bench"})
	}
	pub, err := connect(0)
	if err != nil {
		return res, err
	}
	defer pub.Close()
	say("seeding %d prompts", o.Cold+1)
	id := "bench-support"
	seed := []client.Event{
		client.PromptCreated{ID: id, Type: "system", Name: "Support", Content: clientBenchPrompt, Parameters: clientBenchParams},
		client.PromptCreated{ID: id, Type: "system", Name: "Support", Content: clientBenchPrompt + "\nVersion 2.", Parameters: clientBenchParams},
		client.PromptActivated{PromptID: id, Version: 1, Label: "production"},
	}
	for i := range o.Cold {
		seed = append(seed, client.PromptCreated{ID: fmt.Sprintf("bench-cold-%05d", i), Type: "task", Name: "Cold", Content: clientBenchPrompt, Parameters: clientBenchParams})
	}
	if err := publishIndexed(ctx, pub, seed); err != nil {
		return res, err
	}
	params := map[string]any{"Product": "Acme Cloud"}

	// Hits, and the rendering alone.
	say("hits")
	warm, err := connect(0)
	if err != nil {
		return res, err
	}
	defer warm.Close()
	hits, err := timeGets(ctx, warm, id, params, o.Requests)
	if err != nil {
		return res, err
	}
	res.HitP50, res.HitP99 = quantiles(hits)
	got, err := warm.GetPrompt(ctx, id, client.WithParams(params))
	if err != nil {
		return res, err
	}
	if s := warm.CacheStats(); s.Misses != 1 {
		return res, fmt.Errorf("hits: %d misses, want 1 (the first get)", s.Misses)
	}
	tmpl, err := library.Parse(got.Prompt.Content)
	if err != nil {
		return res, err
	}
	lp := make([]library.Param, len(got.Prompt.Parameters))
	for i, p := range got.Prompt.Parameters {
		lp[i] = library.Param{Name: p.Name, Type: p.Type, Required: p.Required, Default: p.Default}
	}
	var renders []time.Duration
	for range o.Requests {
		start := time.Now()
		if _, err := tmpl.Render(ctx, lp, params, library.Limits{}); err != nil {
			return res, err
		}
		renders = append(renders, time.Since(start))
	}
	res.RenderP50, res.RenderP99 = quantiles(renders)

	// Misses, and a bare request/reply of the same size.
	say("misses")
	uncached, err := connect(-1)
	if err != nil {
		return res, err
	}
	defer uncached.Close()
	misses, err := timeGets(ctx, uncached, id, params, o.Requests)
	if err != nil {
		return res, err
	}
	res.MissP50, res.MissP99 = quantiles(misses)
	reply, err := pub.Conn().Request("prompts.get."+tenant, []byte(`{"id":"`+id+`"}`), 5*time.Second)
	if err != nil {
		return res, err
	}
	requests, err := bareRequests(ctx, cfg.NATSURL, len(reply.Data), o.Requests)
	if err != nil {
		return res, err
	}
	res.RequestP50, res.RequestP99 = quantiles(requests)

	// First gets, from the database.
	say("first gets")
	cold, err := connect(0)
	if err != nil {
		return res, err
	}
	defer cold.Close()
	var colds []time.Duration
	for i := range o.Cold {
		start := time.Now()
		if _, err := cold.GetPrompt(ctx, fmt.Sprintf("bench-cold-%05d", i), client.WithParams(params)); err != nil {
			return res, err
		}
		colds = append(colds, time.Since(start))
	}
	res.ColdP50, res.ColdP99 = quantiles(colds)

	// Label moves.
	say("label moves to %d clients", o.Clients)
	moves, published, err := labelMoves(ctx, connect, pub, id, tenant, o, say)
	if err != nil {
		return res, err
	}
	res.MoveP50, res.MoveP99 = quantiles(moves)
	res.MoveMax = moves[len(moves)-1]
	res.PublishP50, res.PublishP99 = quantiles(published)
	fan, err := fanout(ctx, cfg.NATSURL, len(reply.Data), o.Clients, o.Moves)
	if err != nil {
		return res, err
	}
	res.FanoutP50, res.FanoutP99 = quantiles(fan)
	res.FanoutMax = fan[len(fan)-1]
	return res, nil
}

// publishIndexed publishes evs and waits until the indexer answered each.
func publishIndexed(ctx context.Context, c *client.Client, evs []client.Event) error {
	var answered, rejected atomic.Int64
	for _, s := range []string{"prompt.indexed.", "indexer.rejected."} {
		sub, err := c.Conn().Subscribe(s+c.Tenant(), func(m *nats.Msg) {
			if m.Subject == "indexer.rejected."+c.Tenant() {
				rejected.Add(1)
			}
			answered.Add(1)
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	for _, ev := range evs {
		// One after the other: the activation must follow the versions.
		p, err := c.Publish(ctx, ev)
		if err != nil {
			return err
		}
		if _, err := p.Wait(ctx); err != nil {
			return err
		}
	}
	for answered.Load() < int64(len(evs)) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d answered by the indexer: %w", answered.Load(), len(evs), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := rejected.Load(); n > 0 {
		return fmt.Errorf("the indexer rejected %d of the %d seed events", n, len(evs))
	}
	return nil
}

// timeGets times n GetPrompt calls of id, after one untimed.
func timeGets(ctx context.Context, c *client.Client, id string, params map[string]any, n int) ([]time.Duration, error) {
	if _, err := c.GetPrompt(ctx, id, client.WithParams(params)); err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := c.GetPrompt(ctx, id, client.WithParams(params)); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// bareRequests times n core NATS request/replies with a reply of size
// bytes, from a connection of its own to a responder of its own.
func bareRequests(ctx context.Context, url string, size, n int) ([]time.Duration, error) {
	srv, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	body := make([]byte, size)
	sub, err := srv.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(body) })
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := srv.Flush(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	req := []byte(`{"id":"bench-support"}`)
	if _, err := nc.RequestWithContext(ctx, "bench.echo", req); err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := nc.RequestWithContext(ctx, "bench.echo", req); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// labelMoves moves production between id's two versions o.Moves times
// with o.Clients clients connected, each polling GetPrompt every o.Poll
// while a move is under way, and returns, per client and move, the time
// from the prompt.indexed result (heard by a plain subscriber) and from
// publishing the activation to the first GetPrompt that returned the new
// version.
func labelMoves(ctx context.Context, connect func(int) (*client.Client, error), pub *client.Client, id, tenant string, o ClientOptions, say func(string, ...any)) (fromResult, fromPublish []time.Duration, err error) {
	clients := make([]*client.Client, o.Clients)
	for i := range clients {
		if clients[i], err = connect(0); err != nil {
			return nil, nil, err
		}
		defer clients[i].Close()
		if _, err := clients[i].GetPrompt(ctx, id); err != nil {
			return nil, nil, err
		}
	}
	indexedAt := make(chan struct {
		cause string
		at    time.Time
	}, 16)
	sub, err := pub.Conn().Subscribe("prompt.indexed."+tenant, func(m *nats.Msg) {
		at := time.Now()
		ev, err := bus.Decode(m.Header, m.Data)
		if err != nil {
			return
		}
		indexedAt <- struct {
			cause string
			at    time.Time
		}{bus.Causation(ev), at}
	})
	if err != nil {
		return nil, nil, err
	}
	defer sub.Unsubscribe()

	version := 1
	for move := range o.Moves {
		version = 3 - version // 1 → 2 → 1 ...
		seen := make([]time.Time, len(clients))
		var wg sync.WaitGroup
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var failed atomic.Value
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					got, err := c.GetPrompt(mctx, id)
					if err == nil && got.Prompt.Version == version {
						seen[i] = time.Now()
						return
					}
					if err != nil {
						failed.Store(err)
					}
					select {
					case <-mctx.Done():
						return
					case <-time.After(o.Poll):
					}
				}
			}()
		}
		published := time.Now()
		p, err := pub.Publish(ctx, client.PromptActivated{PromptID: id, Version: version, Label: "production"})
		if err != nil {
			cancel()
			return nil, nil, err
		}
		var result time.Time
		for result.IsZero() {
			select {
			case r := <-indexedAt:
				if r.cause == p.ID {
					result = r.at
				}
			case <-mctx.Done():
				cancel()
				return nil, nil, fmt.Errorf("move %d: no prompt.indexed for the activation", move)
			}
		}
		wg.Wait()
		cancel()
		for i, at := range seen {
			if at.IsZero() {
				err, _ := failed.Load().(error)
				return nil, nil, fmt.Errorf("move %d: client %d did not serve version %d within 10s (last error: %v)", move, i, version, err)
			}
			fromResult = append(fromResult, max(0, at.Sub(result)))
			fromPublish = append(fromPublish, at.Sub(published))
		}
		say("move %d: p99 %.2f ms", move+1, ms(p99(fromResult[len(fromResult)-len(clients):])))
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fromResult, fromPublish, nil
}

func p99(xs []time.Duration) time.Duration {
	ys := append([]time.Duration(nil), xs...)
	_, q := quantiles(ys)
	return q
}

// fanout is the anchor of a label move: one core message published to n
// plain connections, each of which makes a bare request/reply (reply of
// size bytes) on receipt; the times from publishing to each reply, over
// rounds.
func fanout(ctx context.Context, url string, size, n, rounds int) ([]time.Duration, error) {
	srv, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	body := make([]byte, size)
	if _, err := srv.Subscribe("bench.fanout.echo", func(m *nats.Msg) { _ = m.Respond(body) }); err != nil {
		return nil, err
	}
	if err := srv.Flush(); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var done []time.Time
	var wg sync.WaitGroup
	for range n {
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		if _, err := nc.Subscribe("bench.fanout.push", func(*nats.Msg) {
			defer wg.Done()
			if _, err := nc.Request("bench.fanout.echo", []byte(`{"id":"bench-support","fresh":true}`), 5*time.Second); err != nil {
				return
			}
			mu.Lock()
			done = append(done, time.Now())
			mu.Unlock()
		}); err != nil {
			return nil, err
		}
		if err := nc.Flush(); err != nil {
			return nil, err
		}
	}
	payload, _ := json.Marshal(map[string]any{"prompt_id": "bench-support"})
	var out []time.Duration
	for range rounds {
		mu.Lock()
		done = done[:0]
		mu.Unlock()
		wg.Add(n)
		start := time.Now()
		if err := srv.Publish("bench.fanout.push", payload); err != nil {
			return nil, err
		}
		wg.Wait()
		mu.Lock()
		if len(done) != n {
			mu.Unlock()
			return nil, fmt.Errorf("fan-out anchor: %d of %d replies", len(done), n)
		}
		for _, at := range done {
			out = append(out, at.Sub(start))
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return out, nil
}
