package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

// --- phase 1: indexing ---

// resultCounter counts the indexer's results of one tenant on a
// connection of its own and notes when each kind reached its target.
type resultCounter struct {
	mu                     sync.Mutex
	prompts, tools         int
	promptsWant, toolsWant int
	promptsAt, toolsAt     time.Time // when the last one arrived
	rejected               int
	firstReject            string
	promptsCh, toolsCh     chan struct{} // closed then
	last                   time.Time
}

func (rc *resultCounter) handle(m *nats.Msg) {
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.last = now
	kind := ""
	switch {
	case strings.HasPrefix(m.Subject, "prompt.indexed."):
		kind = "prompt"
	case strings.HasPrefix(m.Subject, "tool.indexed."):
		kind = "tool"
	default: // indexer.rejected
		var data struct { // the body is the event's data (binary mode)
			EventType string `json:"event_type"`
			Reason    string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &data)
		rc.rejected++
		if rc.firstReject == "" {
			rc.firstReject = data.EventType + ": " + data.Reason
		}
		if strings.Contains(data.EventType, "tool") {
			kind = "tool"
		} else {
			kind = "prompt"
		}
	}
	if kind == "prompt" {
		if rc.prompts++; rc.prompts == rc.promptsWant {
			rc.promptsAt = now
			close(rc.promptsCh)
		}
	} else {
		if rc.tools++; rc.tools == rc.toolsWant {
			rc.toolsAt = now
			close(rc.toolsCh)
		}
	}
}

func (b *indexerBench) indexing(ctx context.Context) error {
	mon, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-monitor"))
	if err != nil {
		return err
	}
	defer mon.Close()
	rc := &resultCounter{promptsWant: b.o.Prompts, toolsWant: b.o.Tools,
		promptsCh: make(chan struct{}), toolsCh: make(chan struct{}), last: time.Now()}
	for _, s := range []string{"prompt.indexed.", "tool.indexed.", "indexer.rejected."} {
		sub, err := mon.Subscribe(s+b.tenant, rc.handle)
		if err != nil {
			return err
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := mon.Flush(); err != nil {
		return err
	}

	// The backlog: every prompt, then every tool, published while no
	// indexer runs.
	b.say("publishing %d prompt.created and %d tool.registered", b.o.Prompts, b.o.Tools)
	start := time.Now()
	for i := range b.c.prompts {
		ev, err := bus.NewEvent(indexer.TypePromptCreated, b.tenant, "agentq-bench", b.c.promptData(i))
		if err != nil {
			return err
		}
		if _, err := b.d.Publisher.PublishAsync(ev); err != nil {
			return err
		}
	}
	for i := range b.c.tools {
		ev, err := bus.NewEvent(indexer.TypeToolRegistered, b.tenant, "agentq-bench", b.c.toolData(i))
		if err != nil {
			return err
		}
		if _, err := b.d.Publisher.PublishAsync(ev); err != nil {
			return err
		}
	}
	if err := b.d.Publisher.Flush(ctx); err != nil {
		return err
	}
	b.res.Indexing.Publish = float64(b.o.Prompts+b.o.Tools) / time.Since(start).Seconds()
	b.say("published at %.0f/s; starting the indexer", b.res.Indexing.Publish)

	runDone, err := b.startIndexers(ctx)
	if err != nil {
		return err
	}
	// It starts consuming right after its search service answers (the
	// embedders are open and the vector indexes exist by then).
	ready, err := b.serviceReady(ctx, mon, runDone)
	if err != nil {
		return err
	}
	b.say("indexer serving after %s; draining", time.Since(start).Round(time.Millisecond))
	if err := waitResults(ctx, rc, rc.promptsCh, runDone, b.say, "prompts"); err != nil {
		return err
	}
	if err := waitResults(ctx, rc, rc.toolsCh, runDone, b.say, "tools"); err != nil {
		return err
	}
	rc.mu.Lock()
	ix := &b.res.Indexing
	// A copy may drain a tiny backlog before the probe sees any copy
	// serving: then only the time from the first publish means anything.
	drain := rc.promptsAt.Sub(ready)
	if drain <= 0 {
		drain = rc.promptsAt.Sub(start)
	}
	ix.Prompts = float64(b.o.Prompts) / drain.Seconds()
	ix.PromptsWall = float64(b.o.Prompts) / rc.promptsAt.Sub(start).Seconds()
	// Tools follow prompts in the stream; in a run so small that both
	// share one batch, the tools' time is the whole drain.
	toolsTime := rc.toolsAt.Sub(rc.promptsAt)
	if toolsTime <= 0 {
		toolsTime = rc.toolsAt.Sub(ready)
	}
	if toolsTime <= 0 {
		toolsTime = rc.toolsAt.Sub(start)
	}
	ix.Tools = float64(b.o.Tools) / toolsTime.Seconds()
	ix.Rejected = rc.rejected
	reject := rc.firstReject
	rc.mu.Unlock()
	b.say("indexed: prompts %.0f/s, tools %.0f/s, %d rejected %s", ix.Prompts, ix.Tools, ix.Rejected, reject)
	if ix.Rejected > 0 {
		return fmt.Errorf("%d events rejected, e.g. %s", ix.Rejected, reject)
	}
	// Autovacuum would analyse the new rows soon; do it now, so plans
	// are those of a settled table. A table at a time, each tried again
	// when Postgres breaks a deadlock by cancelling it: the indexer may be
	// rebuilding prompts' IVFFlat index (CREATE INDEX CONCURRENTLY waits
	// for the ANALYZE's transaction, which waits for the build's lock).
	for _, table := range []string{"prompts", "tools", "prompt_labels", "index_tool_health", "index_quality"} {
		for try := 1; ; try++ {
			_, err = b.d.Pool.Exec(ctx, `ANALYZE `+table)
			var pgErr *pgconn.PgError
			if err == nil || try == 5 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
				break
			}
			b.say("ANALYZE %s met the index build (deadlock); again", table)
		}
		if err != nil {
			return fmt.Errorf("analyze %s: %w", table, err)
		}
	}
	return nil
}

// existing checks that the --search-only tenant holds the corpus of these
// options, and starts the indexer to serve it.
func (b *indexerBench) existing(ctx context.Context) error {
	var prompts, ids, tools int
	if err := b.d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM prompts WHERE tenant_id = $1),
  (SELECT count(DISTINCT id) FROM prompts WHERE tenant_id = $1), (SELECT count(*) FROM tools WHERE tenant_id = $1)`,
		b.tenant).Scan(&prompts, &ids, &tools); err != nil {
		return err
	}
	if prompts != b.o.Prompts || ids != b.o.PromptIDs || tools != b.o.Tools {
		return fmt.Errorf("--search-only: tenant %s holds %d prompts over %d ids and %d tools, not %d over %d and %d: give the options (and --seed) of the run that indexed it",
			b.tenant, prompts, ids, tools, b.o.Prompts, b.o.PromptIDs, b.o.Tools)
	}
	mon, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-monitor"))
	if err != nil {
		return err
	}
	defer mon.Close()
	runDone, err := b.startIndexers(ctx)
	if err != nil {
		return err
	}
	if _, err := b.serviceReady(ctx, mon, runDone); err != nil {
		b.stop()
		return err
	}
	b.say("tenant %s: %d prompts over %d ids and %d tools; the indexer serves it", b.tenant, prompts, ids, tools)
	return nil
}

// startIndexers starts the indexer copies: the first on the bench's own
// connections, each other on connections of its own, as separate processes
// would. runDone receives the first copy's end (a copy that stops on its
// own stops the others); b.stop stops them all.
func (b *indexerBench) startIndexers(ctx context.Context) (chan error, error) {
	ictx, cancel := context.WithCancel(ctx)
	deps := []*app.Deps{b.d}
	closeExtra := func() {
		for _, d := range deps[1:] {
			d.Close(context.WithoutCancel(ctx))
		}
	}
	for i := 2; i <= b.o.Copies; i++ {
		d, err := app.Start(ctx, b.cfg, fmt.Sprintf("bench-indexer-%d", i), b.log.Level(zerolog.WarnLevel))
		if err != nil {
			cancel()
			closeExtra()
			return nil, fmt.Errorf("indexer copy %d: %w", i, err)
		}
		deps = append(deps, d)
	}
	runDone := make(chan error, 1)
	var wg sync.WaitGroup
	for i, d := range deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := app.Run(ictx, d, indexer.NewConsumer(indexer.Options{}))
			cancel() // a copy that stops on its own stops the others
			if i == 0 {
				runDone <- err
			}
		}()
	}
	b.stop = func() {
		cancel()
		wg.Wait()
		closeExtra()
	}
	return runDone, nil
}

// serviceReady waits until prompts.get answers on tenant, and returns when.
func (b *indexerBench) serviceReady(ctx context.Context, nc *nats.Conn, runDone chan error) (time.Time, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := service.Call(rctx, nc, search.GetSubject+"."+b.tenant, search.GetRequest{ID: "bench-ready-probe"}, nil)
		cancel()
		var serr *service.Error
		if errors.As(err, &serr) || err == nil {
			return time.Now(), nil
		}
		select {
		case err := <-runDone:
			return time.Time{}, fmt.Errorf("indexer stopped while starting: %v", err)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return time.Time{}, errors.New("the indexer's search service did not answer within 5 minutes")
		}
	}
}

// waitResults waits for done, failing when nothing arrives for 2 minutes
// or the indexer stops.
func waitResults(ctx context.Context, rc *resultCounter, done chan struct{}, runDone chan error, say func(string, ...any), what string) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case err := <-runDone:
			return fmt.Errorf("indexer stopped: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			rc.mu.Lock()
			p, t, last := rc.prompts, rc.tools, rc.last
			rc.mu.Unlock()
			say("%s: %d/%d prompts, %d/%d tools indexed", what, p, rc.promptsWant, t, rc.toolsWant)
			if time.Since(last) > 2*time.Minute {
				return fmt.Errorf("no result for 2 minutes: %d of %d prompts, %d of %d tools indexed (dead-lettered? see AGENTQ_DLQ)", p, rc.promptsWant, t, rc.toolsWant)
			}
		}
	}
}

// embedders measures each embedder alone on a sample of the texts, as the
// indexer calls it: one goroutine, one call per batch.
func (b *indexerBench) embedders(ctx context.Context) error {
	batch := b.res.BatchSize
	rate := func(e embed.Embedder, texts []string) (float64, error) {
		start := time.Now()
		for i := 0; i < len(texts); i += batch {
			if _, err := e.Embed(ctx, texts[i:min(i+batch, len(texts))]); err != nil {
				return 0, err
			}
		}
		return float64(len(texts)) / time.Since(start).Seconds(), nil
	}
	sample := func(e embed.Embedder, n int) int {
		if e.Model() == embed.LexicalModel {
			return min(n, 10000)
		}
		return min(n, 1000) // a model: a thousand texts say its rate
	}
	ix := &b.res.Indexing
	ix.PromptEmbedSamples = sample(b.pe, len(b.c.prompts))
	texts := make([]string, ix.PromptEmbedSamples)
	for i := range texts {
		texts[i] = b.c.promptText(i)
	}
	var err error
	if ix.PromptsEmbed, err = rate(b.pe, texts); err != nil {
		return err
	}
	ix.ToolEmbedSamples = sample(b.te, len(b.c.tools))
	texts = make([]string, ix.ToolEmbedSamples)
	for i := range texts {
		texts[i] = b.c.toolText(i)
	}
	if ix.ToolsEmbed, err = rate(b.te, texts); err != nil {
		return err
	}
	b.say("embedders alone: prompts %.0f/s (%s), tools %.0f/s (%s)", ix.PromptsEmbed, b.pe.Model(), ix.ToolsEmbed, b.te.Model())
	return nil
}
