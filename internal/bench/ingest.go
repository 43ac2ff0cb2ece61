package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/ingest"
	"github.com/agentq/agentq/schemas"
)

// IngestOptions configure Ingest.
type IngestOptions struct {
	Events      int // events per phase and round
	Batch       int // events per HTTP request, and per acknowledged window of the anchors
	Rounds      int // rounds of the four phases; medians are reported
	Concurrency int // senders at once in every phase
}

// IngestResult is what one ingest bench run measured: events/s, medians
// over the rounds, of four ways of getting the same events into stream
// AGENTQ, each round running them back to back.
type IngestResult struct {
	IngestOptions
	// Raw: JetStream async publishing of messages encoded before the
	// clock starts, a batch at a time, each batch's acks awaited: the
	// physical anchor.
	Raw float64
	// Publish: what agentq publish does for each event (validate, encode,
	// publish, wait for the ack), one event at a time per sender.
	Publish float64
	// PublishAsync: the same validation and encoding, published a batch at
	// a time with the batch's acks awaited: ingest without HTTP.
	PublishAsync float64
	// Ingest: POST of a CloudEvents batch to agentq ingest over loopback,
	// each answered after JetStream's acks.
	Ingest float64
	// RoundRatios are ingest/raw per round.
	RoundRatios []float64
	// Request latencies of the last round: a raw batch acknowledged, an
	// ingest POST answered.
	RawP50, RawP99, IngestP50, IngestP99 time.Duration
}

// Print writes r as the table `agentq bench ingest` prints.
func (r IngestResult) Print(w io.Writer) {
	per := make([]string, len(r.RoundRatios))
	for i, x := range r.RoundRatios {
		per[i] = fmt.Sprintf("%.1f%%", 100*x)
	}
	fmt.Fprintf(w, `agentq bench ingest: %d events per phase, batches of %d, senders %d, %d rounds (medians)
  raw JetStream publish, pre-encoded, a batch acked at a time   %9.0f events/s   batch p50 %.2f ms, p99 %.2f ms
  agentq publish: validate + encode + publish + ack, one by one %9.0f events/s
  bus.Publisher async: validated, a batch acked at a time       %9.0f events/s
  agentq ingest: HTTP POST of a CloudEvents batch, answered     %9.0f events/s   request p50 %.2f ms, p99 %.2f ms
  ingest / raw                                                  %9.1f %%   (per round: %s)
  ingest / validated async                                      %9.1f %%
  ingest / agentq publish                                       %9.1f ×
`, r.Events, r.Batch, r.Concurrency, r.Rounds, r.Raw, ms(r.RawP50), ms(r.RawP99), r.Publish, r.PublishAsync,
		r.Ingest, ms(r.IngestP50), ms(r.IngestP99), 100*r.Ingest/r.Raw, strings.Join(per, " "), 100*r.Ingest/r.PublishAsync, r.Ingest/r.Publish)
}

const ingestBenchTenant = "bench-ingest"

// Ingest measures agentq ingest on an embedded NATS server (no database:
// nothing consumes), against the anchors of IngestResult.
func Ingest(ctx context.Context, cfg config.Config, o IngestOptions, log zerolog.Logger) (IngestResult, error) {
	res := IngestResult{IngestOptions: o}
	dir, err := os.MkdirTemp("", "agentq-bench-ingest-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("agentq-bench"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return res, err
	}
	if err := bus.EnsureStreams(ctx, js, cfg.Stream); err != nil {
		return res, err
	}
	reg, err := schemas.Load()
	if err != nil {
		return res, err
	}
	pub := bus.NewPublisher(js, reg)

	// The endpoint, as agentq ingest runs it, on a connection of its own.
	token, line, err := auth.New(ingestBenchTenant)
	if err != nil {
		return res, err
	}
	tokens, err := auth.Parse(strings.NewReader(line))
	if err != nil {
		return res, err
	}
	inc, err := ingest.Connect(srv.ClientURL(), "agentq-bench-ingest", log)
	if err != nil {
		return res, err
	}
	defer inc.Close()
	h, err := ingest.New(inc, reg, tokens, ingest.Options{
		MaxPayload: cfg.MaxPayload, MaxBody: cfg.Ingest.MaxBody, MaxBatch: max(cfg.Ingest.MaxBatch, o.Batch),
		AckTimeout: cfg.Ingest.AckTimeout, MaxInFlight: max(cfg.Ingest.MaxInFlight, o.Concurrency), Log: log.Level(zerolog.WarnLevel),
	})
	if err != nil {
		return res, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	sctx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ingest.Serve(sctx, ln, h, time.Second) }()
	defer func() { stopServer(); <-served }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Concurrency}}
	url := ingest.URL(ln.Addr().String())

	stream, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return res, err
	}
	type phase struct {
		name string
		run  func([][]event.Event) ([]time.Duration, error)
	}
	phases := []phase{
		{"raw", func(b [][]event.Event) ([]time.Duration, error) { return rawBatches(ctx, js, b, o.Concurrency) }},
		{"publish", func(b [][]event.Event) ([]time.Duration, error) {
			return nil, perSender(b, o.Concurrency, func(batch []event.Event) error {
				for _, ev := range batch {
					if _, err := pub.Publish(ctx, ev); err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{"async", func(b [][]event.Event) ([]time.Duration, error) {
			return nil, perSender(b, o.Concurrency, func(batch []event.Event) error {
				futs := make([]jetstream.PubAckFuture, len(batch))
				for i, ev := range batch {
					f, err := pub.PublishAsync(ev)
					if err != nil {
						return err
					}
					futs[i] = f
				}
				return awaitAcks(ctx, futs)
			})
		}},
		{"ingest", func(b [][]event.Event) ([]time.Duration, error) {
			return postBatches(ctx, client, url, token, b, o.Concurrency)
		}},
	}
	rates := make([][]float64, len(phases))
	// Round -1 warms every phase up (connections, the file store, the
	// schema validator's caches) on a tenth of the events, unmeasured.
	for round := -1; round < o.Rounds; round++ {
		po := o
		if round < 0 {
			po.Events = max(o.Batch, o.Events/10)
		}
		if err := stream.Purge(ctx); err != nil {
			return res, err
		}
		// Events of its own for each phase (the duplicate window would
		// drop repeated ids), made before the clock starts.
		events := make([][][]event.Event, len(phases))
		for i, p := range phases {
			if events[i], err = ingestBenchEvents(po, fmt.Sprintf("%s-%d", p.name, round)); err != nil {
				return res, err
			}
		}
		// The phases take turns on slices of their events, in an order
		// that rotates, so a burst of load elsewhere on a shared machine
		// falls on all of them alike.
		spent := make([]time.Duration, len(phases))
		lats := make([][]time.Duration, len(phases))
		for c := 0; c < len(events[0]); c += ingestChunk {
			for k := range phases {
				i := (k + c/ingestChunk) % len(phases)
				chunk := events[i][c:min(c+ingestChunk, len(events[i]))]
				start := time.Now()
				lat, err := phases[i].run(chunk)
				if err != nil {
					return res, fmt.Errorf("%s: %w", phases[i].name, err)
				}
				spent[i] += time.Since(start)
				lats[i] = append(lats[i], lat...)
			}
		}
		if round < 0 {
			continue
		}
		for i := range phases {
			rates[i] = append(rates[i], float64(po.Events)/spent[i].Seconds())
		}
		res.RoundRatios = append(res.RoundRatios, rates[3][round]/rates[0][round])
		res.RawP50, res.RawP99 = quantiles(lats[0])
		res.IngestP50, res.IngestP99 = quantiles(lats[3])
	}
	res.Raw, res.Publish, res.PublishAsync, res.Ingest = median(rates[0]), median(rates[1]), median(rates[2]), median(rates[3])
	return res, nil
}

// ingestChunk is how many batches a phase sends in one turn.
const ingestChunk = 10

// ingestBenchEvents makes o.Events tool.executed events of the bench
// tenant, with data of a realistic size (an input and a 200-character
// output excerpt), in batches of o.Batch.
func ingestBenchEvents(o IngestOptions, source string) ([][]event.Event, error) {
	out := strings.Repeat("Result excerpt of a web search, as agents report it. ", 4)
	var batches [][]event.Event
	for i := 0; i < o.Events; i += o.Batch {
		var batch []event.Event
		for j := i; j < min(i+o.Batch, o.Events); j++ {
			ev, err := bus.NewEvent(bus.Type("tool", "executed"), ingestBenchTenant, "bench/"+source, map[string]any{
				"tool_name": fmt.Sprintf("tool_%d", j%50), "success": j%10 != 0, "latency_ms": 100 + j%400,
				"run_id": fmt.Sprintf("run-%d", j/10), "step_idx": j % 10, "input": map[string]any{"query": "weather in Paris"}, "output": out,
			})
			if err != nil {
				return nil, err
			}
			batch = append(batch, ev)
		}
		batches = append(batches, batch)
	}
	return batches, nil
}

// perSender runs send on every batch, senders at a time, and returns the
// first error.
func perSender(batches [][]event.Event, senders int, send func([]event.Event) error) error {
	next := make(chan []event.Event)
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				if err := send(b); err != nil {
					errs <- err
					for range next { // drain
					}
					return
				}
			}
		}()
	}
	for _, b := range batches {
		next <- b
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// timedSenders is perSender timing each batch.
func timedSenders(batches [][]event.Event, senders int, send func([]event.Event) error) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	err := perSender(batches, senders, func(b []event.Event) error {
		start := time.Now()
		if err := send(b); err != nil {
			return err
		}
		mu.Lock()
		lat = append(lat, time.Since(start))
		mu.Unlock()
		return nil
	})
	return lat, err
}

// rawBatches encodes every event first, then publishes a batch at a time
// and awaits its acks.
func rawBatches(ctx context.Context, js jetstream.JetStream, batches [][]event.Event, senders int) ([]time.Duration, error) {
	msgs := map[*event.Event]*nats.Msg{}
	for _, b := range batches {
		for i := range b {
			m, err := bus.Encode(b[i])
			if err != nil {
				return nil, err
			}
			msgs[&b[i]] = m
		}
	}
	return timedSenders(batches, senders, func(b []event.Event) error {
		futs := make([]jetstream.PubAckFuture, len(b))
		for i := range b {
			var err error
			if futs[i], err = js.PublishMsgAsync(msgs[&b[i]]); err != nil {
				return err
			}
		}
		return awaitAcks(ctx, futs)
	})
}

func awaitAcks(ctx context.Context, futs []jetstream.PubAckFuture) error {
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// postBatches renders every batch as a request body first, then POSTs them
// and requires a 202 with every event accepted.
func postBatches(ctx context.Context, client *http.Client, url, token string, batches [][]event.Event, senders int) ([]time.Duration, error) {
	bodies := map[*event.Event][]byte{}
	for _, b := range batches {
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		bodies[&b[0]] = raw
	}
	return timedSenders(batches, senders, func(b []event.Event) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[&b[0]]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", event.ApplicationCloudEventsBatchJSON)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body) // to the end, so the connection is reused
		if err != nil {
			return err
		}
		var answer ingest.Response
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("%s: %w", res.Status, err)
		}
		if res.StatusCode != http.StatusAccepted || answer.Accepted != len(b) {
			return fmt.Errorf("%s: %s", res.Status, answer.Message)
		}
		return nil
	})
}
