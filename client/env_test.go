package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/testenv"
)

// The package's tests and examples share one agentq: an embedded NATS
// server, the test database, and an indexer and a degrader running in
// this process, as `agentq dev` runs them. Tests keep apart by tenant.
var (
	// natsURL is the shared NATS server's URL.
	natsURL string
	// tenant is the examples' tenant, with the prompts and tools of the
	// repository's examples/ directory indexed.
	tenant string
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		code = 1
	}
	testenv.Shutdown()
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "agentq-client-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	natsURL = srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ensureStreams(ctx, natsURL); err != nil {
		return 0, err
	}
	dbURL, err := testenv.Database()
	if err != nil {
		return 0, err
	}
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"AGENTQ_NATS_URL": natsURL, "AGENTQ_DATABASE_URL": dbURL}[k]
	})
	if err != nil {
		return 0, err
	}
	cfg.MetricsAddr, cfg.EmbedTools = "", "lexical" // as testenv.Config
	d, err := app.Start(ctx, cfg, "client-test", zerolog.Nop())
	if err != nil {
		return 0, err
	}
	defer d.Close(context.Background())
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx, d, indexer.Consumer, health.Consumer) }()
	defer func() { stop(); <-done }()

	tenant = fmt.Sprintf("ex%x", time.Now().UnixNano()&0xffffffff)
	if err := seedExamples(ctx, tenant); err != nil {
		return 0, fmt.Errorf("seed examples: %w", err)
	}
	return m.Run(), nil
}

func ensureStreams(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return bus.EnsureStreams(ctx, js, bus.StreamOptions{})
}

// seedExamples publishes examples/prompts.yaml and examples/tools.yaml for
// tenant, as `agentq prompt seed` and `agentq tool register` do, and waits
// until the indexer has answered each.
func seedExamples(ctx context.Context, tenant string) error {
	var prompts []client.PromptCreated
	if err := readYAML("../examples/prompts.yaml", &prompts); err != nil {
		return err
	}
	var tools []client.ToolRegistered
	if err := readYAML("../examples/tools.yaml", &tools); err != nil {
		return err
	}
	c, err := client.Connect(ctx, client.Config{URL: natsURL, Tenant: tenant})
	if err != nil {
		return err
	}
	defer c.Close()
	var answered atomic.Int64
	for _, s := range []string{"prompt.indexed.", "tool.indexed.", "indexer.rejected."} {
		sub, err := c.Conn().Subscribe(s+tenant, func(*nats.Msg) { answered.Add(1) })
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	for _, p := range prompts {
		if _, err := c.Publish(ctx, p); err != nil {
			return err
		}
	}
	for _, t := range tools {
		if _, err := c.Publish(ctx, t); err != nil {
			return err
		}
	}
	if err := c.Flush(ctx); err != nil {
		return err
	}
	for want := int64(len(prompts) + len(tools)); answered.Load() < want; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d answers from the indexer: %w", answered.Load(), want, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// readYAML reads a YAML list into out through JSON, so the structs' JSON
// names are the YAML keys.
func readYAML(path string, out any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return json.Unmarshal(j, out)
}
