package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// Subjects are the alerts delivered.
var Subjects = []string{"tool.degraded.*", "tool.quarantined.*", "tool.recovered.*"}

// Options configure delivery.
type Options struct {
	Consumer  string        // durable name; default "webhooks"
	Endpoints []Endpoint    // nil: from the configuration
	Timeout   time.Duration // one POST; default 10s
	// GiveUp is how old an alert may get while an endpoint keeps failing
	// before it is dead-lettered; default 24h.
	GiveUp time.Duration
	// Concurrency bounds POSTs in flight per batch; default 8.
	Concurrency int
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "webhooks"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 24 * time.Hour
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	return o
}

// Sender posts alerts to endpoints.
type Sender struct {
	pool   *pgxpool.Pool
	opts   Options
	client *http.Client
	log    zerolog.Logger
	m      *metrics

	mu   sync.Mutex
	gone map[string]bool // endpoints that answered 410, until restart
}

// NewSender returns a sender over pool.
func NewSender(pool *pgxpool.Pool, opts Options, reg prometheus.Registerer, log zerolog.Logger) *Sender {
	opts = opts.withDefaults()
	return &Sender{pool: pool, opts: opts, log: log, m: newMetrics(reg), gone: map[string]bool{},
		client: &http.Client{Timeout: opts.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Handle delivers one alert to every endpoint that wants it and does not
// have it yet.
func (s *Sender) Handle(ctx context.Context, d *bus.Delivery) error {
	var targets []Endpoint
	for _, e := range s.opts.Endpoints {
		if e.Wants(d.Tenant) && !s.isGone(e) {
			targets = append(targets, e)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	done, err := s.delivered(ctx, d)
	if err != nil {
		return database.Classify(err)
	}
	var failed []string
	var last error
	for _, e := range targets {
		if done[e.ID()] {
			continue
		}
		status, err := s.post(ctx, e, d)
		switch {
		case err == nil && status >= 200 && status < 300:
			s.m.deliveries.WithLabelValues(e.ID(), "delivered").Inc()
			if _, err := s.pool.Exec(ctx, `
				INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_id, status, attempts)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
				e.ID(), d.Tenant, d.Event.ID(), status, int(d.NumDelivered)); err != nil {
				// Sent but not recorded: a redelivery sends it again, with
				// the same webhook-id, which receivers drop.
				return database.Classify(fmt.Errorf("record delivery: %w", err))
			}
		case err == nil && status == http.StatusGone:
			s.m.deliveries.WithLabelValues(e.ID(), "gone").Inc()
			s.m.disabled.WithLabelValues(e.ID()).Inc()
			s.setGone(e)
			s.log.Error().Str("endpoint", e.ID()).Str("event_id", d.Event.ID()).
				Msg("webhook endpoint answered 410 Gone: disabled until the process restarts")
		default:
			s.m.deliveries.WithLabelValues(e.ID(), "failed").Inc()
			if err == nil {
				err = fmt.Errorf("HTTP %d", status)
			}
			failed, last = append(failed, e.ID()), err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	sort.Strings(failed)
	err = fmt.Errorf("webhook %s: %w", strings.Join(failed, ", "), last)
	if age := time.Since(d.Time); age > s.opts.GiveUp {
		return bus.Permanentf("gave up after %s (AGENTQ_ALERT_WEBHOOK_GIVE_UP %s): %w", age.Round(time.Second), s.opts.GiveUp, err)
	}
	// A receiver being down is not the alert's fault: it waits, with the
	// runner's backoff, without spending its delivery budget and without
	// pausing the delivery of other alerts (to other endpoints).
	return bus.Deferred(err)
}

func (s *Sender) isGone(e Endpoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone[e.ID()]
}

func (s *Sender) setGone(e Endpoint) {
	s.mu.Lock()
	s.gone[e.ID()] = true
	s.mu.Unlock()
}

func (s *Sender) delivered(ctx context.Context, d *bus.Delivery) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT endpoint_id FROM webhook_deliveries WHERE tenant_id = $1 AND event_id = $2`, d.Tenant, d.Event.ID())
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// post sends the alert once and returns the status.
func (s *Sender) post(ctx context.Context, e Endpoint, d *bus.Delivery) (int, error) {
	body, ctype, err := render(e.Format, d)
	if err != nil {
		return 0, bus.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return 0, bus.Permanent(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "agentq-webhooks")
	now := time.Now()
	req.Header.Set("webhook-id", d.Event.ID())
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	if e.Secret != nil {
		req.Header.Set("webhook-signature", Sign(e.Secret, d.Event.ID(), now, body))
	}
	// The alert's trace context, the agent call's that caused it: the
	// receiver's handling joins that trace (W3C Trace Context headers).
	if tc := bus.Trace(d.Event); tc.Parent != "" {
		req.Header.Set("traceparent", tc.Parent)
		if tc.State != "" {
			req.Header.Set("tracestate", tc.State)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return 0, ctx.Err()
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// render is the request body: the CloudEvent in structured mode, or a Slack
// message.
func render(f Format, d *bus.Delivery) ([]byte, string, error) {
	if f == Slack {
		var data map[string]any
		if err := bus.DecodeData(d.Event.Data(), &data); err != nil {
			return nil, "", err
		}
		text := fmt.Sprintf("*%v* (%s): %v → *%v*", data["tool_name"], d.Tenant, data["previous_state"], data["state"])
		if q, ok := data["quality_score"].(float64); ok {
			text += fmt.Sprintf(", quality %.0f%%", 100*q)
		}
		if r, ok := data["reason"].(string); ok && r != "" {
			text += "\n" + r
		}
		b, err := json.Marshal(map[string]string{"text": text})
		return b, "application/json", err
	}
	b, err := bus.EncodeStructured(d.Event)
	return b, "application/cloudevents+json; charset=utf-8", err
}

type metrics struct {
	deliveries *prometheus.CounterVec
	disabled   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentq", Name: "webhook_deliveries_total",
			Help: "Alert POSTs by endpoint and outcome (delivered, failed, gone)."}, []string{"endpoint", "outcome"}),
		disabled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentq", Name: "webhook_endpoints_disabled_total",
			Help: "Endpoints disabled after answering 410 Gone (until the process restarts)."}, []string{"endpoint"}),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.deliveries, &m.disabled} {
			if err := reg.Register(*c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					*c = are.ExistingCollector.(*prometheus.CounterVec)
				}
			}
		}
	}
	return m
}

// NewConsumer returns webhook delivery as an app consumer; with no endpoint
// configured it idles.
func NewConsumer(opts Options) app.Consumer {
	name := opts.Consumer
	if name == "" {
		name = "webhooks"
	}
	return app.Consumer{Name: name, Run: func(ctx context.Context, d *app.Deps) error {
		opts := opts
		if opts.Endpoints == nil {
			eps, err := ParseEndpoints(d.Config.Alerts.WebhookURL, d.Config.Alerts.WebhookSecret)
			if err != nil {
				return fmt.Errorf("AGENTQ_ALERT_WEBHOOK_URL: %w", err)
			}
			opts.Endpoints = eps
		}
		if opts.Timeout <= 0 {
			opts.Timeout = d.Config.Alerts.WebhookTimeout
		}
		if opts.GiveUp <= 0 {
			opts.GiveUp = d.Config.Alerts.WebhookGiveUp
		}
		opts = opts.withDefaults()
		if len(opts.Endpoints) == 0 {
			<-ctx.Done() // nothing to deliver to
			return nil
		}
		s := NewSender(d.Pool, opts, d.Registry, d.Log.With().Str("component", "webhooks").Logger())
		ro := d.Config.Runner(opts.Consumer, Subjects...)
		r, err := bus.NewRunner(d.JS, d.Schemas, bus.Concurrent(opts.Concurrency, opts.Timeout+5*time.Second, s.Handle), ro, d.Log, d.Metrics)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}
}

// Consumer delivers alerts to the configured endpoints.
var Consumer = NewConsumer(Options{})
