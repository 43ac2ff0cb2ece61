package mcpserver

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/health"
)

// Tool health is what the degrader announced: its tool.degraded,
// tool.quarantined and tool.recovered results on the stream, each carrying
// the tool's state after a transition and a per-tool version. The server
// folds them per tenant, the last version of each tool winning, and on
// each call reads only what the stream gained since the last one; it
// keeps no state the stream cannot give back, and needs nothing but NATS.

// HealthInput is tool_health's input.
type HealthInput struct {
	ToolName string `json:"tool_name,omitempty" jsonschema:"Only this tool (its last announced state, healthy included). Omitted: every tool whose last announced state is not healthy."`
}

// HealthOutput is tool_health's output.
type HealthOutput struct {
	Tools []ToolHealth `json:"tools" jsonschema:"The tools, by name."`
}

// ToolHealth is a tool's last announced state.
type ToolHealth struct {
	ToolName      string    `json:"tool_name" jsonschema:"The tool."`
	State         string    `json:"state" jsonschema:"degraded: failing more than its own record says it should (prefer another tool); quarantined: hidden from tool_search, do not call it; probation: released or past its quarantine, its next calls decide; healthy: recovered."`
	PreviousState string    `json:"previous_state,omitempty" jsonschema:"The state before."`
	Since         time.Time `json:"since" jsonschema:"When the degrader decided this state."`
	QualityScore  float64   `json:"quality_score" jsonschema:"The tool's recent share of good outcomes, 0 to 1, when it decided."`
	Threshold     float64   `json:"threshold" jsonschema:"The floor the score was held against, 0 to 1."`
	Evidence      float64   `json:"evidence,omitempty" jsonschema:"Evidence against the tool, 1.0 or more raised the alert."`
	Reason        string    `json:"reason,omitempty" jsonschema:"Why, in words."`
	DegradedSince time.Time `json:"degraded_since,omitzero" jsonschema:"When the tool first fell below its bar in this episode."`
	// Quarantine.
	QuarantineEnds time.Time `json:"quarantine_ends_at,omitzero" jsonschema:"When the quarantine ends by itself (absent: it lasts until an operator releases it)."`
	Offence        int       `json:"offence,omitempty" jsonschema:"How many times the tool has been quarantined, this time included; quarantines grow longer with each."`
	ProbationEnds  time.Time `json:"probation_ends_at,omitzero" jsonschema:"When probation ends at the latest."`
	HeldBack       bool      `json:"held_back,omitempty" jsonschema:"True when the tool qualified for quarantine but was kept searchable, since too many of the tenant's tools are quarantined already."`
	EventID        string    `json:"event_id" jsonschema:"The id of the degrader's event that announced this state."`
	version        int64
}

// transition is the data of the degrader's results that the fold reads.
type transition struct {
	ToolName      string  `json:"tool_name"`
	State         string  `json:"state"`
	PreviousState string  `json:"previous_state"`
	QualityScore  float64 `json:"quality_score"`
	Threshold     float64 `json:"threshold"`
	Evidence      float64 `json:"evidence"`
	Reason        string  `json:"reason"`
	DegradedSince string  `json:"degraded_since"`
	HeldBack      bool    `json:"held_back"`
	Version       int64   `json:"version"`
	At            string  `json:"at"`
	Quarantine    *struct {
		ExpiresAt string `json:"expires_at"`
		Offence   int    `json:"offence"`
	} `json:"quarantine"`
	ProbationEndsAt string `json:"probation_ends_at"`
}

// healthFold keeps the folds of the tenants asked about most recently, at
// most max of them (least recently used out first): over HTTP one server
// serves every tenant of the token file, and a fold holds every tool its
// tenant's degrader ever announced. A tenant whose fold went out reads it
// again from the stream at its next call, which is slower, never wrong.
type healthFold struct {
	js      jetstream.JetStream
	max     int
	mu      sync.Mutex
	order   *list.List // of *tenantHealth, the most recently used first
	tenants map[string]*list.Element
}

// tenantHealth is one tenant's tools as announced up to stream sequence
// next-1. Its lock serialises the calls that bring it up to date.
type tenantHealth struct {
	tenant string
	mu     sync.Mutex
	next   uint64
	tools  map[string]ToolHealth
}

func newHealthFold(js jetstream.JetStream, max int) *healthFold {
	return &healthFold{js: js, max: max, order: list.New(), tenants: map[string]*list.Element{}}
}

// fold is tenant's fold, made (and the least recently used one dropped
// beyond max) when it has none. A call still working on a dropped fold
// finishes on it; the next call makes a new one.
func (f *healthFold) fold(tenant string) *tenantHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	if el, ok := f.tenants[tenant]; ok {
		f.order.MoveToFront(el)
		return el.Value.(*tenantHealth)
	}
	th := &tenantHealth{tenant: tenant, next: 1, tools: map[string]ToolHealth{}}
	f.tenants[tenant] = f.order.PushFront(th)
	for f.order.Len() > f.max {
		old := f.order.Remove(f.order.Back()).(*tenantHealth)
		delete(f.tenants, old.tenant)
	}
	return th
}

// tools returns tenant's tools as announced up to the stream's end at the
// time of the call, by name.
func (f *healthFold) tools(ctx context.Context, tenant string) ([]ToolHealth, error) {
	th := f.fold(tenant)
	th.mu.Lock()
	defer th.mu.Unlock()
	if err := th.catchUp(ctx, f.js, tenant); err != nil {
		return nil, err
	}
	out := make([]ToolHealth, 0, len(th.tools))
	for _, t := range th.tools {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b ToolHealth) int { return strings.Compare(a.ToolName, b.ToolName) })
	return out, nil
}

// catchUp reads the tenant's results from th.next to the end of the
// stream as it is when called.
func (th *tenantHealth) catchUp(ctx context.Context, js jetstream.JetStream, tenant string) error {
	var subjects []string
	for _, typ := range []string{health.TypeToolDegraded, health.TypeToolQuarantined, health.TypeToolRecovered} {
		s, err := bus.SubjectFor(typ, tenant)
		if err != nil {
			return err
		}
		subjects = append(subjects, s)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: th.next,
		// Gone soon after the call: one is made per call.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("tool health: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("tool health: %w", err)
	}
	for pending := info.NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("tool health: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("tool health: %w", err)
			}
			th.apply(m)
			th.next, pending = meta.Sequence.Stream+1, meta.NumPending
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("tool health: %w", err)
		}
		if got == 0 {
			return errors.New("tool health: the stream delivered nothing of what it holds; retry")
		}
	}
	return nil
}

// apply folds one result in; what is not one (undecodable, another type)
// is passed by, as every reader of the stream does.
func (th *tenantHealth) apply(m jetstream.Msg) {
	ev, err := bus.Decode(m.Headers(), m.Data())
	if err != nil {
		return
	}
	var d transition
	if err := bus.DecodeData(ev.Data(), &d); err != nil || d.ToolName == "" {
		return
	}
	if cur, ok := th.tools[d.ToolName]; ok && cur.version >= d.Version {
		return // a republished or older result
	}
	t := ToolHealth{ToolName: d.ToolName, State: d.State, PreviousState: d.PreviousState, Since: parseTime(d.At),
		QualityScore: d.QualityScore, Threshold: d.Threshold, Evidence: d.Evidence, Reason: d.Reason,
		DegradedSince: parseTime(d.DegradedSince), ProbationEnds: parseTime(d.ProbationEndsAt), HeldBack: d.HeldBack,
		EventID: ev.ID(), version: d.Version}
	if t.Since.IsZero() {
		t.Since = ev.Time().UTC()
	}
	if d.Quarantine != nil {
		t.Offence = d.Quarantine.Offence
		if d.State == string(health.Quarantined) {
			t.QuarantineEnds = parseTime(d.Quarantine.ExpiresAt)
		}
	}
	th.tools[d.ToolName] = t
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// toolHealth is the tool_health tool.
func (s *Server) toolHealth(ctx context.Context, c call, in HealthInput) (HealthOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	all, err := s.health.tools(ctx, c.tenant)
	if err != nil {
		s.log.Warn().Err(err).Str("tenant", c.tenant).Msg("tool health")
		return HealthOutput{}, explain(err, "the stream")
	}
	out := HealthOutput{Tools: []ToolHealth{}}
	for _, t := range all {
		if in.ToolName != "" && t.ToolName == in.ToolName || in.ToolName == "" && t.State != string(health.Healthy) {
			out.Tools = append(out.Tools, t)
		}
	}
	return out, nil
}
