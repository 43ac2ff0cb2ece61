package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/health"
)

// This file holds agentq alerts and agentq tool health / release: what an
// operator uses around the degrader.

func init() {
	register("alerts", "tool health alerts (degraded, quarantined, recovered) as readable lines; --follow for new ones", runAlerts)
	describe("alerts", "[--tenant T] [--since D] [--follow | --count N [--timeout D]] [--json]", `Prints the degrader's transitions from stream AGENTQ, oldest first, one line
each: time, tenant, tool, previous → new state, why, and the figures behind
it (quality, evidence, offence, expiry). Without --tenant every tenant's.

--since limits the history to the last D (e.g. 24h); --follow keeps
printing new transitions until Ctrl-C; --count N waits until N have been
printed (at most --timeout, default 1m), for scripts. --json prints one
JSON object per line with the event's id and cause.`)
	describe("tool health", "[--tenant T | --all-tenants] [--json]", `Prints every tool the degrader knows, with its state, recent quality (share
of good outcomes), baseline failure rate, outcomes seen, evidence against
it (1.0 raises an alert), offences and, in quarantine or probation, when
that ends. Reads the degrader's tables (AGENTQ_DATABASE_URL, or the running
agentq dev's database).`)
	describe("tool release", "NAME [--tenant T] [--reason TEXT] [--by WHO] [--timeout D] [--json]", `Lifts the quarantine of tool NAME by publishing tool.released, and waits
for the degrader's answer: tool.recovered with state probation (the tool is
searchable again and its next calls decide), or degrader.rejected when the
tool is not quarantined. Exits 1 on a refusal or when no answer comes.`)
}

type alertLine struct {
	Time     time.Time      `json:"time"`
	Tenant   string         `json:"tenant"`
	Type     string         `json:"type"`
	ID       string         `json:"id"`
	Cause    string         `json:"cause,omitempty"`
	Data     map[string]any `json:"data"`
	Sequence uint64         `json:"seq"`
}

func (a alertLine) text() string {
	d := a.Data
	s := fmt.Sprintf("%s %s %s %v → %v", a.Time.UTC().Format(time.RFC3339), a.Tenant, d["tool_name"], d["previous_state"], d["state"])
	if q, ok := d["quality_score"].(float64); ok {
		s += fmt.Sprintf(" quality=%.2f", q)
	}
	if ev, ok := d["evidence"].(float64); ok {
		s += fmt.Sprintf(" evidence=%.2f", ev)
	}
	if q, ok := d["quarantine"].(map[string]any); ok {
		s += fmt.Sprintf(" offence=%v", q["offence"])
		if x, ok := q["expires_at"].(string); ok && x != "" {
			s += " until=" + x
		}
	}
	if x, ok := d["probation_ends_at"].(string); ok && x != "" {
		s += " probation_until=" + x
	}
	if held, _ := d["held_back"].(bool); held {
		s += " held_back"
	}
	if r, ok := d["reason"].(string); ok && r != "" {
		s += " — " + oneLineText(r)
	}
	return s
}

func runAlerts(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("alerts", e)
	tenant := fs.String("tenant", "", "only this tenant's alerts (default: every tenant)")
	since := fs.Duration("since", 0, "only alerts of the last D (0: the whole history)")
	follow := fs.Bool("follow", false, "keep printing new alerts until Ctrl-C")
	count := fs.Int("count", 0, "wait until this many alerts have been printed, then exit (0: print what there is)")
	timeout := fs.Duration("timeout", time.Minute, "with --count: give up after this long")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(e, fs, "alerts", "unexpected arguments %v", pos)
	}
	if *count < 0 || (*count > 0 && *follow) {
		return usageError(e, fs, "alerts", "--count must be positive and excludes --follow")
	}
	if *count > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	tok := "*"
	if *tenant != "" {
		if !bus.ValidTenant(*tenant) {
			return usageError(e, fs, "alerts", "tenant %q does not match [a-z0-9_-]{1,64}", *tenant)
		}
		tok = *tenant
	}
	subjects := []string{"tool.degraded." + tok, "tool.quarantined." + tok, "tool.recovered." + tok}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if *since > 0 {
		start := time.Now().Add(-*since)
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, occ)
	if err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	pending := info.NumPending
	keepGoing := *follow || *count > 0
	if pending == 0 && !keepGoing {
		if !*asJSON {
			fmt.Fprintln(e.Stderr, "no alerts")
		}
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for printed := 0; ; printed++ {
		if *count > 0 && printed >= *count {
			return nil
		}
		if !keepGoing && pending == 0 {
			return nil
		}
		m, err := it.Next()
		if err != nil {
			if *count > 0 && ctx.Err() != nil {
				return fmt.Errorf("%d of %d alerts within %s", printed, *count, *timeout)
			}
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		meta, _ := m.Metadata()
		if meta != nil {
			pending = meta.NumPending
		}
		ev, err := bus.Decode(m.Headers(), m.Data())
		if err != nil {
			printed--
			continue
		}
		a := alertLine{Time: ev.Time(), Tenant: bus.Tenant(ev), Type: ev.Type(), ID: ev.ID(), Cause: bus.Causation(ev)}
		if meta != nil {
			a.Time, a.Sequence = meta.Timestamp, meta.Sequence.Stream
		}
		if err := bus.DecodeData(ev.Data(), &a.Data); err != nil {
			printed--
			continue
		}
		if *asJSON {
			if err := json.NewEncoder(e.Stdout).Encode(a); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(e.Stdout, a.text())
		}
	}
}

func runToolHealth(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "tool health"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	all := fs.Bool("all-tenants", false, "every tenant's tools")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(e, fs, name, "unexpected arguments %v", pos)
	}
	scope := *tenant
	if *all {
		scope = ""
	} else if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	url, err := databaseURL(e, cfg)
	if err != nil {
		return err
	}
	pool, err := database.Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := health.List(ctx, pool, scope, health.ParamsFrom(cfg.Degrade))
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []health.Health{}
		}
		return writeJSON(e.Stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.Stderr, "no tools known to the degrader yet (it learns them from tool.executed, tool.rated and tool.registered)")
		return nil
	}
	printHealth(e.Stdout, list)
	return nil
}

func printHealth(w io.Writer, list []health.Health) {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTOOL\tSTATE\tQUALITY\tBASELINE FAIL\tCALLS\tRATINGS\tEVIDENCE\tOFFENCES\tUNTIL\tWHY")
	for _, h := range list {
		until := ""
		if !h.Expires.IsZero() {
			until = h.Expires.UTC().Format(time.RFC3339)
		}
		state := string(h.State)
		if h.HeldBack {
			state += " (held back)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.1f%%\t%d\t%d\t%.2f\t%d\t%s\t%s\n", h.Tenant, h.Tool, state, h.Quality, 100*h.Baseline,
			h.Calls, h.Ratings, h.Evidence, h.Offences, until, oneLineText(h.Reason))
	}
	_ = tw.Flush()
}

func runToolRelease(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "tool release"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	reason := fs.String("reason", "", "why the quarantine is lifted (kept in the event)")
	by := fs.String("by", e.Getenv("USER"), "who lifts it (kept in the event as released_by)")
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the degrader's answer")
	asJSON := fs.Bool("json", false, "print the outcome as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(e, fs, name, "NAME is required, got %d arguments", len(pos))
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	data := map[string]any{"tool_name": pos[0]}
	if *reason != "" {
		data["reason"] = *reason
	}
	if *by != "" {
		data["released_by"] = *by
	}
	r, err := newRequest(health.TypeToolReleased, *tenant, cliSource, data)
	if err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return usageError(e, fs, name, "%v", err)
	}
	if err := r.connect(e, cfg); err != nil {
		return err
	}
	defer r.close()
	got, err := r.await(ctx, health.TypeToolRecovered, health.TypeRejected, *timeout)
	if err != nil {
		return err
	}
	if got == nil {
		return fmt.Errorf("no answer from the degrader within %s to tool.released %s: is the degrader running (`make dev` runs it)?", *timeout, r.ev.ID())
	}
	a := alertLine{Time: got.At, Tenant: *tenant, Type: got.Type, ID: got.ID, Cause: r.ev.ID()}
	_ = json.Unmarshal(got.Data, &a.Data)
	var failure error
	if a.Type == health.TypeRejected {
		failure = fmt.Errorf("refused: %v", a.Data["reason"])
	}
	return finish(e, *asJSON, a, failure, func(w io.Writer) {
		fmt.Fprintf(w, "%s is on probation for tenant %s: searchable again; its next calls decide (until %v)\n", pos[0], *tenant, a.Data["probation_ends_at"])
	})
}
