package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// Consumer lag is on /metrics, read from JetStream's consumer info at
// scrape time, for every consumer the process runs: events waiting
// (pending), events handed out and not yet acked (ack_pending), and events
// redelivered and not yet acked (redelivered).
func TestConsumerLagMetrics(t *testing.T) {
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := app.Start(ctx, cfg, "test", testenv.Logger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	tenant := testenv.Tenant(t)
	subject := "tool.executed." + tenant

	// idle creates its durable consumer and never fetches; held fetches
	// and holds everything until the test ends; retried fails every
	// event with an outage, so each comes back again and again.
	idle := app.Consumer{Name: "lag-idle", Run: func(ctx context.Context, d *app.Deps) error {
		_, err := d.JS.CreateOrUpdateConsumer(ctx, bus.StreamName, jetstream.ConsumerConfig{
			Durable: "lag-idle", FilterSubjects: []string{subject}, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}}
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	runner := func(name string, h bus.HandlerFunc) app.Consumer {
		return app.Consumer{Name: name, Run: func(ctx context.Context, d *app.Deps) error {
			o := d.Config.Runner(name, subject)
			o.Backoff = []time.Duration{50 * time.Millisecond}
			r, err := bus.NewRunner(d.JS, d.Schemas, bus.Each(h), o, d.Log, d.Metrics)
			if err != nil {
				return err
			}
			return r.Run(ctx)
		}}
	}
	held := runner("lag-held", func(ctx context.Context, _ *bus.Delivery) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	retried := runner("lag-retried", func(context.Context, *bus.Delivery) error {
		return bus.Unavailable(errors.New("database down"))
	})
	runDone := make(chan error, 1)
	go func() { runDone <- app.Run(ctx, d, idle, held, retried) }()
	defer func() { cancel(); once.Do(func() { close(release) }); <-runDone }()

	for i := range 3 {
		ev, err := bus.NewEvent("agentq.tool.executed.v1", tenant, "test", map[string]any{"tool_name": fmt.Sprint("t", i), "success": true})
		require.NoError(t, err)
		_, err = d.Publisher.Publish(ctx, ev)
		require.NoError(t, err)
	}

	srv := httptest.NewServer(app.MetricsHandler(d))
	defer srv.Close()
	gauge := func(body, name, consumer string) (float64, bool) {
		m := regexp.MustCompile(`(?m)^agentq_consumer_` + name + `\{consumer="` + consumer + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v, true
	}
	scrape := func() string {
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	want := map[string][3]float64{ // pending, ack_pending, redelivered
		"lag-idle": {3, 0, 0},
		"lag-held": {0, 3, 0},
	}
	var body string
	testenv.Eventually(t, 30*time.Second, func() bool {
		body = scrape()
		for consumer, w := range want {
			for i, name := range []string{"pending", "ack_pending", "redelivered"} {
				if v, ok := gauge(body, name, consumer); !ok || v != w[i] {
					return false
				}
			}
		}
		v, ok := gauge(body, "redelivered", "lag-retried")
		return ok && v >= 1
	}, "consumer lag gauges on /metrics; last scrape:\n%s", lazy(func() string { return body }))
	require.Contains(t, body, "# HELP agentq_consumer_pending ")
	require.Contains(t, body, "# TYPE agentq_consumer_ack_pending gauge")

	// Acked: no lag left.
	once.Do(func() { close(release) })
	testenv.Eventually(t, 30*time.Second, func() bool {
		v, ok := gauge(scrape(), "ack_pending", "lag-held")
		return ok && v == 0
	}, "lag-held acked everything")
}

// lazy formats as what its function returns when the message is printed.
type lazy func() string

func (l lazy) String() string { return l() }
