package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/schemas"
)

// --- event ids ---

// catalogNamespace seeds the ids of the events seed and register publish.
var catalogNamespace = uuid.MustParse("c3a5f0d2-41e8-4f7b-9c52-6d0b8e1a7f94")

// catalogEventID is the id of the event that publishes one entry: a UUIDv5
// of the tenant, the event type, the entry's canonical JSON and the
// duplicate window it is published in (window number bucket). Within one
// window the same entry always gets the same id, so a repeated or retried
// seed is dropped by JetStream's duplicate detection (whose window is as
// long, so two publishes in one bucket are always within it). In a later
// window the id is new: the indexer receives the event again and answers
// "unchanged", instead of recognising an event id it applied before and
// answering nothing.
func catalogEventID(tenant, eventType string, bucket int64, canonical []byte) string {
	return uuid.NewSHA1(catalogNamespace, []byte(tenant+"\x00"+eventType+"\x00"+strconv.FormatInt(bucket, 10)+"\x00"+string(canonical))).String()
}

// duplicateWindow returns stream AGENTQ's duplicate window.
func duplicateWindow(ctx context.Context, js jetstream.JetStream) (time.Duration, error) {
	s, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	w := s.CachedInfo().Config.Duplicates
	if w <= 0 {
		w = 2 * time.Minute // JetStream's default
	}
	return w, nil
}

// --- answers: the indexer's results, matched by causationid ---

// indexed is the data of prompt.indexed and tool.indexed that the commands
// show.
type indexed struct {
	PromptID    string   `json:"prompt_id"`
	ToolName    string   `json:"tool_name"`
	Version     int      `json:"version"`
	ContentHash string   `json:"content_hash"`
	Labels      []string `json:"labels"`
	Outcome     string   `json:"outcome"` // created (also when absent) or unchanged
}

// rejected is the data of indexer.rejected.
type rejected struct {
	ReasonCode string `json:"reason_code"`
	Reason     string `json:"reason"`
}

// --- publishing a catalog: prompt seed and tool register ---

// catalog describes what seed and register publish and how the indexer
// answers.
type catalog struct {
	noun      string // "prompt" or "tool"
	eventType string // prompt.created or tool.registered
	okType    string // prompt.indexed or tool.indexed
	label     func(entry) string
}

// catalogItem is one entry and what became of it, as --json prints it.
type catalogItem struct {
	Source    string `json:"source"`
	Index     int    `json:"index"`
	Line      int    `json:"line,omitempty"`
	PromptID  string `json:"prompt_id,omitempty"`
	ToolName  string `json:"tool_name,omitempty"`
	Version   int    `json:"version,omitempty"` // as stored (the indexer assigns omitted ones)
	EventID   string `json:"event_id"`
	Duplicate bool   `json:"duplicate_publish"` // JetStream had the event already: nothing was stored again
	Outcome   string `json:"outcome"`           // created, unchanged, rejected or no_answer: what this run did
	// EarlierOutcome is, for a duplicate publish, what the indexer
	// answered the earlier publish of the same event (created, say).
	EarlierOutcome string   `json:"earlier_outcome,omitempty"`
	ContentHash    string   `json:"content_hash,omitempty"`
	Labels         []string `json:"labels,omitempty"`
	ReasonCode     string   `json:"reason_code,omitempty"`
	Reason         string   `json:"reason,omitempty"`
}

// catalogReport is what seed and register print with --json.
type catalogReport struct {
	Tenant     string        `json:"tenant"`
	Created    int           `json:"created"`
	Unchanged  int           `json:"unchanged"`
	Rejected   int           `json:"rejected"`
	NoAnswer   int           `json:"no_answer"`
	Duplicates int           `json:"duplicate_publishes"` // of the unchanged: already published within the duplicate window
	Items      []catalogItem `json:"items"`
	TimedOutIn string        `json:"timeout,omitempty"`
}

// Outcomes of a catalog item.
const (
	outcomeCreated   = "created"
	outcomeUnchanged = "unchanged"
	outcomeRejected  = "rejected"
	outcomeNoAnswer  = "no_answer"
)

// publishCatalog validates ens, publishes them to tenant, waits up to
// timeout for the indexer's answers and reports. It fails when an entry is
// invalid (before publishing anything), rejected or unanswered.
func publishCatalog(ctx context.Context, e Env, cfg config.Config, c catalog, tenant string, ens []entry, timeout time.Duration, asJSON bool) error {
	rep, err := publishEntries(ctx, e, cfg, c, tenant, ens, timeout)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e.Stdout, rep); err != nil {
			return err
		}
	} else {
		printCatalogReport(e.Stdout, c, rep, timeout)
	}
	if rep.Rejected > 0 || rep.NoAnswer > 0 {
		return fmt.Errorf("%d of %d %ss rejected, %d without an answer within %s", rep.Rejected, len(ens), c.noun, rep.NoAnswer, timeout)
	}
	return nil
}

// publishEntries validates ens, publishes them to tenant and returns what
// the indexer answered within timeout. It fails when an entry is invalid
// (before publishing anything) or publishing fails.
func publishEntries(ctx context.Context, e Env, cfg config.Config, c catalog, tenant string, ens []entry, timeout time.Duration) (catalogReport, error) {
	reg, err := schemas.Load()
	if err != nil {
		return catalogReport{}, err
	}
	if err := validateEntries(reg, c.eventType, ens, c.label); err != nil {
		return catalogReport{}, err
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return catalogReport{}, err
	}
	defer nc.Close()
	window, err := duplicateWindow(ctx, js)
	if err != nil {
		return catalogReport{}, err
	}
	now := time.Now()
	bucket := now.UnixNano() / int64(window)
	ids := make([]string, len(ens))
	for i, en := range ens {
		ids[i] = catalogEventID(tenant, c.eventType, bucket, en.raw)
	}
	okSubject, _ := bus.SubjectFor(c.okType, tenant)
	rejSubject, _ := bus.SubjectFor(indexer.TypeRejected, tenant)
	// From one window before this one: a duplicate's answer was published
	// after its original, which is at most one window old; the extra
	// window absorbs clock skew between this machine and the server.
	since := time.Unix(0, (bucket-1)*int64(window)).Add(-time.Minute)
	ans, err := answer.Follow(ctx, js, []string{okSubject, rejSubject},
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}, ids)
	if err != nil {
		return catalogReport{}, err
	}
	defer ans.Stop()
	warnIfNoIndexer(ctx, e, js)

	prog := newProgress(e.Stderr, len(ens), c.noun)
	pub := bus.NewPublisher(js, reg)
	dup := make(map[string]bool, len(ens))
	published := map[string]bool{}
	for i, en := range ens {
		if published[ids[i]] {
			prog.published(i + 1)
			continue // the same definition twice in the input: one event
		}
		ev, err := bus.NewEvent(c.eventType, tenant, "agentq-cli", json.RawMessage(en.raw))
		if err != nil {
			return catalogReport{}, fmt.Errorf("%s: %w", en.where(), err)
		}
		ev.SetID(ids[i])
		ack, err := pub.Publish(ctx, ev)
		if err != nil {
			return catalogReport{}, fmt.Errorf("%s: %w (%d of %d published before it)", en.where(), err, i, len(ens))
		}
		published[ids[i]] = true
		dup[ids[i]] = ack.Duplicate
		prog.published(i + 1)
	}
	prog.waiting(timeout)
	ans.Wait(ctx, timeout, prog.answered)
	prog.done()

	rep := catalogReport{Tenant: tenant}
	for i, en := range ens {
		it := catalogItem{Source: en.source, Index: en.index, Line: en.line, EventID: ids[i], Duplicate: dup[ids[i]], Outcome: outcomeNoAnswer}
		if c.noun == "prompt" {
			it.PromptID = en.str("id")
			if v, ok := asInt(en.data["version"]); ok {
				it.Version = v
			}
		} else {
			it.ToolName = en.str("name")
		}
		if a, ok := ans.Get(ids[i]); ok {
			applyAnswer(&it, a)
		}
		if it.Duplicate && (it.Outcome == outcomeCreated || it.Outcome == outcomeUnchanged) {
			// The answer is the earlier publish's: this run changed
			// nothing.
			it.EarlierOutcome, it.Outcome = it.Outcome, outcomeUnchanged
			rep.Duplicates++
		}
		switch it.Outcome {
		case outcomeCreated:
			rep.Created++
		case outcomeUnchanged:
			rep.Unchanged++
		case outcomeRejected:
			rep.Rejected++
		default:
			rep.NoAnswer++
		}
		rep.Items = append(rep.Items, it)
	}
	if rep.NoAnswer > 0 {
		rep.TimedOutIn = timeout.String()
	}
	return rep, nil
}

// applyAnswer fills it from the indexer's answer.
func applyAnswer(it *catalogItem, a answer.Answer) {
	if a.Type == indexer.TypeRejected {
		var r rejected
		_ = json.Unmarshal(a.Data, &r)
		it.Outcome, it.ReasonCode, it.Reason = outcomeRejected, r.ReasonCode, r.Reason
		return
	}
	var d indexed
	_ = json.Unmarshal(a.Data, &d)
	it.Outcome = outcomeCreated
	if d.Outcome == outcomeUnchanged {
		it.Outcome = outcomeUnchanged
	}
	if d.Version > 0 {
		it.Version = d.Version
	}
	it.ContentHash, it.Labels = d.ContentHash, d.Labels
}

func printCatalogReport(w io.Writer, c catalog, rep catalogReport, timeout time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, it := range rep.Items {
		name := it.ToolName
		if c.noun == "prompt" {
			name = it.PromptID
			if it.Version > 0 {
				name += "@" + strconv.Itoa(it.Version)
			}
		} else if it.Version > 0 {
			name += " v" + strconv.Itoa(it.Version)
		}
		where := fmt.Sprintf("%s#%d", it.Source, it.Index)
		detail := ""
		switch it.Outcome {
		case outcomeCreated, outcomeUnchanged:
			if it.ContentHash != "" {
				detail = "hash " + shortHash(it.ContentHash)
			}
		case outcomeRejected:
			detail = it.ReasonCode + ": " + oneLineText(it.Reason)
		case outcomeNoAnswer:
			detail = "event " + it.EventID
		}
		if it.Duplicate {
			detail += " (already published within the duplicate window"
			if it.EarlierOutcome != "" {
				detail += ": " + it.EarlierOutcome + " then"
			}
			detail += ")"
		}
		outcome := it.Outcome
		if outcome == outcomeNoAnswer {
			outcome = "no answer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", outcome, name, where, strings.TrimSpace(detail))
	}
	_ = tw.Flush()
	dups := ""
	if rep.Duplicates > 0 {
		dups = fmt.Sprintf(" (%d already published within the duplicate window: nothing stored again)", rep.Duplicates)
	}
	fmt.Fprintf(w, "%d %ss for tenant %s: %d created, %d unchanged%s, %d rejected, %d without an answer\n",
		len(rep.Items), c.noun, rep.Tenant, rep.Created, rep.Unchanged, dups, rep.Rejected, rep.NoAnswer)
	if rep.NoAnswer > 0 {
		fmt.Fprintf(w, "no answer within %s: is the indexer running (`make dev` runs it)? `agentq dlq --consumer indexer` lists what it could not process; --timeout waits longer\n", timeout)
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

// asInt returns v as an int when it is a whole number.
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int:
		return n, true
	case float64:
		if n == math.Trunc(n) {
			return int(n), true
		}
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return int(i), true
		}
	}
	return 0, false
}

// warnIfNoIndexer notes on stderr when stream AGENTQ has no indexer
// consumer: the events wait in the stream, and nothing answers them now.
func warnIfNoIndexer(ctx context.Context, e Env, js jetstream.JetStream) {
	if _, err := js.Consumer(ctx, bus.StreamName, "indexer"); errors.Is(err, jetstream.ErrConsumerNotFound) {
		fmt.Fprintln(e.Stderr, "note: stream AGENTQ has no indexer consumer yet: the events are stored, but only a running indexer answers them")
	}
}

// progress reports publishing and answers on stderr: one line updated in
// place on a terminal, else a line every step items.
type progress struct {
	w        io.Writer
	tty      bool
	total    int
	noun     string
	step     int
	pub, ans int
	last     time.Time
}

func newProgress(w io.Writer, total int, noun string) *progress {
	p := &progress{w: w, total: total, noun: noun, step: max(100, total/10)}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		p.tty = true
	}
	fmt.Fprintf(w, "publishing %d %ss ...\n", total, noun)
	return p
}

func (p *progress) published(n int) {
	p.pub = n
	if p.tty {
		p.redraw(n == p.total)
	} else if n%p.step == 0 && n < p.total {
		fmt.Fprintf(p.w, "  %d/%d published\n", n, p.total)
	}
}

func (p *progress) waiting(timeout time.Duration) {
	if p.tty {
		p.redraw(true)
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "waiting for the indexer's answers (up to %s) ...\n", timeout)
}

func (p *progress) answered(n int) {
	prev := p.ans
	p.ans = n
	if p.tty {
		p.redraw(n == p.total)
	} else if n/p.step > prev/p.step && n < p.total {
		fmt.Fprintf(p.w, "  %d/%d answered\n", n, p.total)
	}
}

func (p *progress) done() {
	if p.tty {
		p.redraw(true)
		fmt.Fprintln(p.w)
	}
}

// redraw rewrites the terminal line, at most ten times a second.
func (p *progress) redraw(force bool) {
	if !force && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	done := p.pub
	if p.ans > 0 {
		done = p.ans
	}
	fill := 0
	if p.total > 0 {
		fill = done * width / p.total
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d published, %d answered", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.pub, p.total, p.ans)
}
