package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	register("dlq", "list dead letters with their reasons, or redrive them after a fix", runDLQ)
}

func connect(cfg config.Config) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("agentq-cli"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s (is `agentq dev` running?): %w", cfg.NATSURL, err)
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
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *tenant == "" || *typ == "" {
		fs.Usage()
		return errUsage
	}
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
	ev, err := bus.NewEvent(fullType(*typ), *tenant, *source, obj)
	if err != nil {
		return err
	}
	if *id != "" {
		ev.SetID(*id)
	}
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	ack, err := bus.NewPublisher(js, reg).Publish(ctx, ev)
	if err != nil {
		return err
	}
	subject, _ := bus.Subject(ev)
	dup := ""
	if ack.Duplicate {
		dup = " (duplicate id: already in the stream, not stored again)"
	}
	fmt.Fprintf(e.Stdout, "published %s id=%s subject=%s stream=%s seq=%d%s\n", ev.Type(), ev.ID(), subject, ack.Stream, ack.Sequence, dup)
	return nil
}

func runTail(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("tail", e)
	all := fs.Bool("all", false, "start from the stream's first event instead of new ones")
	count := fs.Int("count", 0, "exit after this many events (0: run until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	subjects := fs.Args()
	if len(subjects) == 0 {
		subjects = bus.FactSubjects
	}
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

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func runDLQ(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("dlq", e)
	consumer := fs.String("consumer", "", "only this consumer's dead letters")
	reason := fs.String("reason", "", "only dead letters with this reason code (schema, max_deliver, ...)")
	limit := fs.Int("limit", 50, "list at most this many, newest last")
	redrive := fs.Bool("redrive", false, "republish the selected dead letters to their original subjects and remove them from the DLQ")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, bus.DLQName)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		fmt.Fprintln(e.Stdout, "no dead letters")
		return nil
	}
	type letter struct {
		seq uint64
		at  time.Time
		dl  bus.DeadLetter
	}
	var selected []letter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (redriven earlier)
		}
		dl := bus.ParseDeadLetter(m.Header, m.Data)
		if (*consumer != "" && dl.Consumer != *consumer) || (*reason != "" && dl.ReasonCode != *reason) {
			continue
		}
		selected = append(selected, letter{seq, m.Time, dl})
	}
	if !*redrive {
		if len(selected) > *limit {
			selected = selected[len(selected)-*limit:]
		}
		for _, l := range selected {
			fmt.Fprintf(e.Stdout, "%d %s consumer=%s subject=%s reason=%s deliveries=%d: %s\n",
				l.seq, l.at.UTC().Format(time.RFC3339), l.dl.Consumer, l.dl.Subject, l.dl.ReasonCode, l.dl.Deliveries, l.dl.Reason)
		}
		if len(selected) == 0 {
			fmt.Fprintln(e.Stdout, "no dead letters match")
		}
		return nil
	}
	for _, l := range selected {
		m := nats.NewMsg(l.dl.Subject)
		for k, v := range l.dl.Header {
			if !strings.HasPrefix(k, "Agentq-Dlq-") && k != "Nats-Msg-Id" {
				m.Header[k] = v
			}
		}
		m.Data = l.dl.Data
		// No Nats-Msg-Id: the original id may still be in the duplicate
		// window, and this copy must be stored. Consumers that applied the
		// event already recognise it by its id in their inbox.
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("redrive dead letter %d to %s: %w", l.seq, l.dl.Subject, err)
		}
		if err := s.DeleteMsg(ctx, l.seq); err != nil {
			return fmt.Errorf("remove redriven dead letter %d: %w", l.seq, err)
		}
		fmt.Fprintf(e.Stdout, "redrove %d to %s (was %s)\n", l.seq, l.dl.Subject, l.dl.ReasonCode)
	}
	fmt.Fprintf(e.Stdout, "%d dead letters redriven\n", len(selected))
	return nil
}
