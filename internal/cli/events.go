package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/schemas"
)

func init() {
	register("publish", "publish one event (data from --data or stdin), validated against its schema", runPublish)
	register("tail", "print events from the stream as they arrive (subjects default to every fact)", runTail)
	register("dlq", "list dead letters with their reasons; redrive them after a fix, or discard them", runDLQ)
	describe("publish", "--tenant T --type TYPE [--data JSON] [--repeat N] [--traceparent TP [--tracestate TS]] [flags]", `Publishes one event to stream AGENTQ after checking its data against the
type's JSON schema (schemas/). The data comes from --data, or from stdin
when --data is absent. A short type such as tool.executed means
agentq.tool.executed.v1.

--traceparent (and --tracestate) put a W3C trace context on the event, the
CloudEvents distributed-tracing extension: every result the event causes
carries it, so ratings, quality changes and alerts join that trace.`)
	describe("tail", "[--all] [--count N] [subject ...]", `Prints the events of stream AGENTQ as they arrive, one line each: time,
type, tenant, id, cause and data.

The arguments are the subjects to follow, <domain>.<event>.<tenant>, with
NATS wildcards: * matches one token, > all the tokens after it (quote it in
the shell). For example:
  quality.changed.demo   the quality changes of tenant demo
  'tool.>'               every tool event of every tenant
  'tool.*.demo'          every tool event of tenant demo
Without arguments every fact is followed (prompt.>, tool.>, quality.>, ...).
A subject on which agentq publishes nothing is refused. Flags may come
before or after the subjects.`)
	describe("dlq", "[--consumer C] [--reason CODE] [--seq N] [--redrive | --discard] [--json]", `Lists the dead letters in stream AGENTQ_DLQ, newest last, one line each:
sequence, time, consumer, original subject, event id and type, reason code,
deliveries and the reason. A dead letter marked "payload by reference" holds
only the reason; its event is the message at that sequence in stream AGENTQ.

After fixing the cause, --redrive republishes the selected dead letters to
their original subjects for the consumer that dead-lettered them (header
Agentq-Redrive-For: the other consumers ack the copy without handling it)
and removes them from the DLQ; --discard deletes them. Both act on every
dead letter the filters select, regardless of --limit.`)
}

// connect connects to cfg.NATSURL; callers resolve it with natsURL first,
// so an explicit AGENTQ_NATS_URL wins and a running agentq dev is found.
func connect(cfg config.Config) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("agentq-cli"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s (start `make dev`, or set AGENTQ_NATS_URL): %w", cfg.NATSURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// fullType accepts "tool.executed" as well as "agentq.tool.executed.v1".
func fullType(t string) string {
	if strings.HasPrefix(t, "agentq.") {
		return t
	}
	return "agentq." + t + ".v1"
}

func runPublish(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("publish", e)
	tenant := fs.String("tenant", "", "tenant id ([a-z0-9_-]{1,64}); required")
	typ := fs.String("type", "", "event type, e.g. tool.executed or agentq.tool.executed.v1; required")
	data := fs.String("data", "", "event data as JSON (default: read from stdin)")
	source := fs.String("source", "agentq-cli", "CloudEvents source")
	id := fs.String("id", "", "event id (default: a new UUIDv7)")
	repeat := fs.Int("repeat", 1, "publish this many events with the same data, each with a new id (a quick way to simulate traffic)")
	traceparent := fs.String("traceparent", "", "W3C trace context: the event joins this trace, and so do the results it causes")
	tracestate := fs.String("tracestate", "", "W3C tracestate to carry with --traceparent")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	switch {
	case *tenant == "" && *typ == "":
		return usageError(e, fs, "publish", "--tenant and --type are required")
	case *tenant == "":
		return usageError(e, fs, "publish", "--tenant is required")
	case *typ == "":
		return usageError(e, fs, "publish", "--type is required")
	case fs.NArg() > 0:
		return usageError(e, fs, "publish", "unexpected argument %q (the data goes in --data or on stdin)", fs.Arg(0))
	case *repeat < 1 || *repeat > 100000:
		return usageError(e, fs, "publish", "--repeat must be 1 to 100000")
	case *repeat > 1 && *id != "":
		return usageError(e, fs, "publish", "--id names one event; it excludes --repeat")
	case *traceparent != "" && !bus.ValidTraceParent(*traceparent):
		return usageError(e, fs, "publish", "--traceparent %q is not a W3C traceparent: version-traceid-parentid-flags in lower-case hex, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", *traceparent)
	case *tracestate != "" && *traceparent == "":
		return usageError(e, fs, "publish", "--tracestate goes with --traceparent")
	}
	// The CloudEvents distributed-tracing extension, as client.WithTrace
	// sets it: results carry it on unchanged.
	trace := bus.TraceContext{Parent: *traceparent, State: *tracestate}
	raw := []byte(*data)
	if *data == "" {
		var err error
		if raw, err = io.ReadAll(e.Stdin); err != nil {
			return err
		}
	}
	var obj json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("data is not JSON: %w", err)
	}
	r, err := newRequest(fullType(*typ), *tenant, *source, obj)
	if err != nil {
		return err
	}
	if *id != "" {
		r.ev.SetID(*id)
	}
	trace.Set(&r.ev)
	if err := r.connect(e, cfg); err != nil {
		return err
	}
	defer r.close()
	if *repeat > 1 {
		// The first in full, then the rest in order, each with its own id.
		for i := 1; i < *repeat; i++ {
			if _, err := r.publish(ctx); err != nil {
				return err
			}
			if r.ev, err = bus.NewEvent(fullType(*typ), *tenant, *source, obj); err != nil {
				return err
			}
			trace.Set(&r.ev)
		}
		fmt.Fprintf(e.Stdout, "published %d more %s events before this one\n", *repeat-1, r.ev.Type())
	}
	ack, err := r.publish(ctx)
	if err != nil {
		return err
	}
	subject, _ := bus.Subject(r.ev)
	dup := ""
	if ack.Duplicate {
		dup = " (duplicate id: already in the stream, not stored again)"
	}
	fmt.Fprintf(e.Stdout, "published %s id=%s subject=%s stream=%s seq=%d%s\n", r.ev.Type(), r.ev.ID(), subject, ack.Stream, ack.Sequence, dup)
	return nil
}

func runTail(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("tail", e)
	all := fs.Bool("all", false, "start from the stream's first event instead of new ones")
	count := fs.Int("count", 0, "exit after this many events (0: run until Ctrl-C)")
	// Flags may come after the subjects too: `tail quality.changed.demo
	// --all` must not follow a subject named --all.
	subjects, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(subjects) == 0 {
		subjects = bus.FactSubjects
	} else {
		reg, err := schemas.Load()
		if err != nil {
			return err
		}
		for _, s := range subjects {
			if err := checkTailSubject(reg, s); err != nil {
				return usageError(e, fs, "tail", "%v", err)
			}
		}
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	policy := jetstream.DeliverNewPolicy
	if *all {
		policy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: policy})
	if err != nil {
		return fmt.Errorf("tail %v: %w", subjects, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	fmt.Fprintf(e.Stderr, "tailing %s ...\n", strings.Join(subjects, " "))
	for n := 0; *count == 0 || n < *count; n++ {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		ev, err := bus.Decode(m.Headers(), m.Data())
		if err != nil {
			fmt.Fprintf(e.Stdout, "%s (not a CloudEvent: %v)\n", m.Subject(), err)
			continue
		}
		cause := ""
		if c := bus.Causation(ev); c != "" {
			cause = " cause=" + c
		}
		fmt.Fprintf(e.Stdout, "%s %s tenant=%s id=%s%s %s\n", ev.Time().UTC().Format(time.RFC3339), ev.Type(), bus.Tenant(ev), ev.ID(), cause, compact(ev.Data()))
	}
	return nil
}

// checkTailSubject refuses a subject that would be followed in silence
// forever: one no stream holds, or one on which agentq publishes no event
// (a typo in the event's name, the tenant token forgotten).
func checkTailSubject(reg *schemas.Registry, subject string) error {
	toks := strings.Split(subject, ".")
	for i, tok := range toks {
		if tok == "" || (tok == ">" && i < len(toks)-1) || (len(tok) > 1 && strings.ContainsAny(tok, "*>")) || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("subject %q is not a NATS subject (tokens separated by dots; * matches one token, > the rest, last)", subject)
		}
	}
	held := false
	for _, f := range bus.FactSubjects {
		held = held || subjectsOverlap(toks, strings.Split(f, "."))
	}
	if !held {
		return fmt.Errorf("no stream holds subject %q: stream %s holds %s", subject, bus.StreamName, strings.Join(bus.FactSubjects, ", "))
	}
	if len(toks) == 3 && toks[2] != "*" && toks[2] != ">" && !bus.ValidTenant(toks[2]) {
		return fmt.Errorf("no agentq event is published on %q: %q is not a tenant id ([a-z0-9_-]{1,64})", subject, toks[2])
	}
	for _, typ := range reg.Types() {
		// agentq.<domain>.<event>.v<N> is published on <domain>.<event>.<tenant>.
		parts := strings.Split(typ, ".")
		if len(parts) == 4 && subjectsOverlap(toks, []string{parts[1], parts[2], "*"}) {
			return nil
		}
	}
	return fmt.Errorf("no agentq event is published on %q: subjects are <domain>.<event>.<tenant>, e.g. quality.changed.demo or 'tool.*.demo'", subject)
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b []string) bool {
	for i := 0; ; i++ {
		switch {
		case i == len(a) || i == len(b):
			return len(a) == len(b)
		case a[i] == ">" || b[i] == ">":
			return true
		case a[i] != b[i] && a[i] != "*" && b[i] != "*":
			return false
		}
	}
}

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// deadLetter is one dead letter as agentq dlq shows it (--json: as is).
type deadLetter struct {
	Seq         uint64    `json:"seq"` // in AGENTQ_DLQ
	Time        time.Time `json:"time"`
	Consumer    string    `json:"consumer"`
	Subject     string    `json:"subject"` // the original's
	EventID     string    `json:"event_id,omitempty"`
	EventType   string    `json:"event_type,omitempty"`
	ReasonCode  string    `json:"reason_code"`
	Reason      string    `json:"reason"`
	Deliveries  uint64    `json:"deliveries"`
	StreamSeq   uint64    `json:"stream_seq,omitempty"` // the original's, in AGENTQ
	ByReference bool      `json:"by_reference"`
	// Data is the original payload when the dead letter carries it and it
	// is JSON.
	Data json.RawMessage `json:"data,omitempty"`

	dl bus.DeadLetter
}

func newDeadLetter(seq uint64, at time.Time, dl bus.DeadLetter) deadLetter {
	l := deadLetter{
		Seq: seq, Time: at.UTC(), Consumer: dl.Consumer, Subject: dl.Subject,
		EventID: dl.EventID, EventType: dl.EventType, ReasonCode: dl.ReasonCode,
		Reason: dl.Reason, Deliveries: dl.Deliveries, StreamSeq: dl.StreamSeq,
		ByReference: dl.ByReference, dl: dl,
	}
	if !dl.ByReference {
		// Dead letters stored before the runner named the event, or by
		// other tools, still carry it.
		if l.EventID == "" {
			if ev, err := bus.Decode(dl.Header, dl.Data); err == nil {
				l.EventID, l.EventType = ev.ID(), ev.Type()
			}
		}
		if json.Valid(dl.Data) {
			l.Data = json.RawMessage(dl.Data)
		}
	}
	return l
}

// line is the text listing's line: everything on one line, the reason last.
func (l deadLetter) line() string {
	id, typ := l.EventID, l.EventType
	if id == "" {
		id = "-"
	}
	if typ == "" {
		typ = "-"
	}
	ref := ""
	if l.ByReference {
		ref = fmt.Sprintf(" (payload by reference: AGENTQ seq %d)", l.StreamSeq)
	}
	return fmt.Sprintf("%d %s consumer=%s subject=%s id=%s type=%s%s reason=%s deliveries=%d: %s",
		l.Seq, l.Time.Format(time.RFC3339), l.Consumer, l.Subject, id, typ, ref, l.ReasonCode, l.Deliveries,
		strings.Join(strings.Fields(l.Reason), " "))
}

func runDLQ(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("dlq", e)
	consumer := fs.String("consumer", "", "select the dead letters of this consumer only (e.g. scorer)")
	reason := fs.String("reason", "", "select the dead letters with this reason code only (schema, max_deliver, ...: the reason= of the listing)")
	seq := fs.Uint64("seq", 0, "select the dead letter with this AGENTQ_DLQ sequence only (the first number of its line)")
	limit := fs.Int("limit", 50, "list at most this many of the selected dead letters, the newest")
	redrive := fs.Bool("redrive", false, "republish the selected dead letters to their original subjects, then remove them from the DLQ")
	discard := fs.Bool("discard", false, "delete the selected dead letters from the DLQ")
	asJSON := fs.Bool("json", false, "print JSON: an array of dead letters; with --redrive or --discard an object with the count and the dead letters handled")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	switch {
	case *redrive && *discard:
		return usageError(e, fs, "dlq", "--redrive and --discard exclude each other")
	case fs.NArg() > 0:
		return usageError(e, fs, "dlq", "unexpected argument %q (select with --consumer, --reason or --seq)", fs.Arg(0))
	case *limit < 1:
		return usageError(e, fs, "dlq", "--limit must be at least 1")
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, bus.DLQName)
	if err != nil {
		return fmt.Errorf("stream %s: %w", bus.DLQName, err)
	}
	selected, err := selectDeadLetters(ctx, s, *seq, func(l deadLetter) bool {
		return (*consumer == "" || l.Consumer == *consumer) && (*reason == "" || l.ReasonCode == *reason)
	})
	if err != nil {
		return err
	}
	switch {
	case *redrive:
		return redriveDeadLetters(ctx, e, js, s, selected, *asJSON)
	case *discard:
		var done []deadLetter
		for _, l := range selected {
			if err := s.DeleteMsg(ctx, l.Seq); err != nil {
				return fmt.Errorf("discard dead letter %d: %w", l.Seq, err)
			}
			done = append(done, l)
			if !*asJSON {
				fmt.Fprintf(e.Stdout, "discarded %d consumer=%s id=%s reason=%s\n", l.Seq, l.Consumer, l.EventID, l.ReasonCode)
			}
		}
		return report(e, *asJSON, "discarded", done)
	}
	if len(selected) > *limit {
		selected = selected[len(selected)-*limit:]
	}
	if *asJSON {
		return writeJSON(e.Stdout, orEmpty(selected))
	}
	for _, l := range selected {
		fmt.Fprintln(e.Stdout, l.line())
	}
	if len(selected) == 0 {
		if *consumer != "" || *reason != "" || *seq != 0 {
			fmt.Fprintln(e.Stdout, "no dead letters match")
		} else {
			fmt.Fprintln(e.Stdout, "no dead letters")
		}
	}
	return nil
}

// selectDeadLetters reads the DLQ, oldest first (or only the message at
// seq), and keeps what match accepts.
func selectDeadLetters(ctx context.Context, s jetstream.Stream, seq uint64, match func(deadLetter) bool) ([]deadLetter, error) {
	first, last := seq, seq
	if seq == 0 {
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.State.Msgs == 0 {
			return nil, nil
		}
		first, last = info.State.FirstSeq, info.State.LastSeq
	}
	var out []deadLetter
	for n := first; n <= last; n++ {
		m, err := s.GetMsg(ctx, n)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed: redriven or discarded earlier
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letter %d: %w", n, err)
		}
		if l := newDeadLetter(n, m.Time, bus.ParseDeadLetter(m.Header, m.Data)); match(l) {
			out = append(out, l)
		}
	}
	return out, nil
}

func redriveDeadLetters(ctx context.Context, e Env, js jetstream.JetStream, dlq jetstream.Stream, letters []deadLetter, asJSON bool) error {
	var (
		done   []deadLetter
		failed int
		facts  jetstream.Stream
	)
	for _, l := range letters {
		subject, header, data := l.Subject, l.dl.Header, l.dl.Data
		if l.ByReference {
			// The dead letter holds only the reason: the event is still
			// in AGENTQ unless the stream's retention removed it.
			if facts == nil {
				s, err := js.Stream(ctx, bus.StreamName)
				if err != nil {
					return fmt.Errorf("stream %s: %w", bus.StreamName, err)
				}
				facts = s
			}
			m, err := facts.GetMsg(ctx, l.StreamSeq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				failed++
				fmt.Fprintf(e.Stderr, "dead letter %d not redriven: its event (AGENTQ seq %d) is no longer in the stream; `agentq dlq --discard --seq %d` removes it\n", l.Seq, l.StreamSeq, l.Seq)
				continue
			}
			if err != nil {
				return fmt.Errorf("read the original of dead letter %d (AGENTQ seq %d): %w", l.Seq, l.StreamSeq, err)
			}
			subject, header, data = m.Subject, m.Header, m.Data
		}
		if subject == "" {
			failed++
			fmt.Fprintf(e.Stderr, "dead letter %d not redriven: it does not name its original subject\n", l.Seq)
			continue
		}
		m := nats.NewMsg(subject)
		for k, v := range header {
			if !strings.HasPrefix(k, "Agentq-Dlq-") && k != "Nats-Msg-Id" {
				m.Header[k] = v
			}
		}
		m.Data = data
		if l.Consumer != "" {
			// For the consumer that failed only: the others applied the
			// original already, and ack this copy without handling it.
			m.Header.Set(bus.HeaderRedriveFor, l.Consumer)
			// It counts where the original does (bus.HeaderRedriveSeq).
			if seq := l.dl.Header.Get(bus.HeaderDLQPlaceSeq); seq != "" {
				m.Header.Set(bus.HeaderRedriveSeq, seq)
				m.Header.Set(bus.HeaderRedriveTime, l.dl.Header.Get(bus.HeaderDLQPlaceTime))
			} else if l.StreamSeq != 0 {
				m.Header.Set(bus.HeaderRedriveSeq, strconv.FormatUint(l.StreamSeq, 10))
			}
		}
		// No Nats-Msg-Id: the original id may still be in the duplicate
		// window, and this copy must be stored. Consumers that applied the
		// event already recognise it by its id in their inbox.
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("redrive dead letter %d to %s: %w", l.Seq, subject, err)
		}
		if err := dlq.DeleteMsg(ctx, l.Seq); err != nil {
			return fmt.Errorf("remove redriven dead letter %d: %w", l.Seq, err)
		}
		done = append(done, l)
		if !asJSON {
			fmt.Fprintf(e.Stdout, "redrove %d to %s (was %s)\n", l.Seq, subject, l.ReasonCode)
		}
	}
	if err := report(e, asJSON, "redriven", done); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d dead letters not redriven (see above)", failed)
	}
	return nil
}

// report prints how many dead letters an action handled.
func report(e Env, asJSON bool, action string, done []deadLetter) error {
	if asJSON {
		return writeJSON(e.Stdout, map[string]any{action: len(done), "dead_letters": orEmpty(done)})
	}
	fmt.Fprintf(e.Stdout, "%d dead letters %s\n", len(done), action)
	return nil
}

func orEmpty(l []deadLetter) []deadLetter {
	if l == nil {
		return []deadLetter{}
	}
	return l
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
