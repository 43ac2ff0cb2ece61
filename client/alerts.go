package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
)

// Alert is one of the degrader's tool health transitions:
// tool.degraded, tool.quarantined or tool.recovered (docs/degrader.md).
type Alert struct {
	// Kind is degraded, quarantined or recovered.
	Kind     string    `json:"-"`
	ID       string    `json:"-"` // the event id; the same alert delivered again has the same id
	Tenant   string    `json:"-"`
	Time     time.Time `json:"-"`
	Sequence uint64    `json:"-"` // position in the stream, for AlertsAfter
	Cause    string    `json:"-"` // id of the event that caused it

	ToolName string `json:"tool_name"`
	// State is the tool's state after the transition, PreviousState
	// before: healthy, warning, degraded, quarantined or probation.
	State         string  `json:"state"`
	PreviousState string  `json:"previous_state"`
	QualityScore  float64 `json:"quality_score"`
	Threshold     float64 `json:"threshold"`
	// Evidence against the tool; 1 raises an alert.
	Evidence            float64     `json:"evidence"`
	Reason              string      `json:"reason"`
	ConsecutiveDegraded int         `json:"consecutive_degraded"`
	DegradedSince       *time.Time  `json:"degraded_since,omitempty"`
	HeldBack            bool        `json:"held_back,omitempty"` // kept out of quarantine by the share cap
	Quarantine          *Quarantine `json:"quarantine,omitempty"`
	ProbationEndsAt     *time.Time  `json:"probation_ends_at,omitempty"`

	// Data is the event's data as published, with any field this
	// package does not know yet.
	Data json.RawMessage `json:"-"`
}

// Quarantine is the quarantine in force with an alert.
type Quarantine struct {
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // nil: no automatic expiry
	Offence   int        `json:"offence"`              // 1 for the first, growing with repeats
	Reason    string     `json:"reason,omitempty"`
}

// AlertOption chooses where SubscribeAlerts starts.
type AlertOption func(*jetstream.OrderedConsumerConfig)

// AlertsSince delivers the alerts of the stream from t on first.
func AlertsSince(t time.Time) AlertOption {
	return func(c *jetstream.OrderedConsumerConfig) {
		c.DeliverPolicy, c.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
}

// AlertsAfter delivers the alerts after stream sequence seq first (an
// Alert's Sequence): resume where a previous subscriber stopped.
func AlertsAfter(seq uint64) AlertOption {
	return func(c *jetstream.OrderedConsumerConfig) {
		c.DeliverPolicy, c.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
}

// SubscribeAlerts calls fn with each tool alert of tenant ("" for the
// client's, "*" for every tenant's) published from now on, one at a time
// in stream order, until ctx ends or the client is closed. The alerts are
// read from the stream, so a dropped connection loses none: delivery
// resumes after the last one handed to fn.
func (c *Client) SubscribeAlerts(ctx context.Context, tenant string, fn func(Alert), opts ...AlertOption) error {
	if c.closed() {
		return ErrClosed
	}
	if tenant == "" {
		tenant = c.cfg.Tenant
	}
	if tenant != "*" && !bus.ValidTenant(tenant) {
		return fmt.Errorf("subscribe alerts: tenant %q does not match [a-z0-9_-]{1,64} (or * for every tenant)", tenant)
	}
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"tool.degraded." + tenant, "tool.quarantined." + tenant, "tool.recovered." + tenant},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	for _, o := range opts {
		o(&occ)
	}
	rctx, cancel := c.requestContext(ctx)
	defer cancel()
	cons, err := c.js.OrderedConsumer(rctx, bus.StreamName, occ)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &TimeoutError{Op: "subscribe alerts", After: c.cfg.RequestTimeout, err: err}
		}
		return &UnavailableError{Op: "subscribe alerts", err: err}
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if a, ok := decodeAlert(m); ok {
			fn(a)
		}
	})
	if err != nil {
		return &UnavailableError{Op: "subscribe alerts", err: err}
	}
	if !c.background(func() {
		select {
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		cc.Stop()
	}) {
		cc.Stop()
		return ErrClosed
	}
	return nil
}

// decodeAlert reads one transition; what agentq did not publish as one
// is skipped.
func decodeAlert(m jetstream.Msg) (Alert, bool) {
	ev, err := bus.Decode(m.Headers(), m.Data())
	if err != nil {
		return Alert{}, false
	}
	var a Alert
	if err := bus.DecodeData(ev.Data(), &a); err != nil {
		return Alert{}, false
	}
	a.Data = json.RawMessage(ev.Data())
	// agentq.tool.<kind>.v1
	if parts := strings.Split(ev.Type(), "."); len(parts) == 4 {
		a.Kind = parts[2]
	}
	a.ID, a.Tenant, a.Time, a.Cause = ev.ID(), bus.Tenant(ev), ev.Time(), bus.Causation(ev)
	if meta, err := m.Metadata(); err == nil {
		a.Sequence = meta.Sequence.Stream
	}
	return a, true
}
