package indexer_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// recorder is an indexer.Sender that keeps what it is asked to publish.
type recorder struct {
	mu   sync.Mutex
	sent []event.Event
}

func (r *recorder) Queue(*pgx.Batch, ...event.Event) error { return nil }

func (r *recorder) Send(_ context.Context, evs []event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, evs...)
	return nil
}

// result is one published result, decoded.
type result struct {
	Type string
	Data map[string]any
}

// byCause returns the results by causing event id; a cause with two
// results fails the test.
func (r *recorder) byCause(t *testing.T) map[string]result {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]result{}
	for _, ev := range r.sent {
		cause, _ := ev.Extensions()[bus.ExtCausation].(string)
		require.NotEmpty(t, cause, "result without causationid")
		_, dup := out[cause]
		require.False(t, dup, "two results for %s", cause)
		var d map[string]any
		require.NoError(t, json.Unmarshal(ev.Data(), &d))
		out[cause] = result{Type: ev.Type(), Data: d}
	}
	return out
}

// rig drives one indexer's handler directly, with deliveries built in the
// test, against the test database.
type rig struct {
	pool   *pgxpool.Pool
	ix     *indexer.Indexer
	out    *recorder
	tenant string
	seq    uint64
	start  time.Time
}

func newRig(t *testing.T) *rig {
	t.Helper()
	pool := testenv.Pool(t)
	out := &recorder{}
	lex := embed.Lexical{}
	ix := indexer.New(pool, out, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{Consumer: "indexer-test"}, testenv.Logger(t))
	return &rig{pool: pool, ix: ix, out: out, tenant: testenv.Tenant(t), start: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
}

// delivery builds an event of the rig's tenant at the next stream sequence.
func (r *rig) delivery(t *testing.T, typ string, data any) *bus.Delivery {
	t.Helper()
	return r.deliveryOf(t, r.tenant, typ, data)
}

func (r *rig) deliveryOf(t *testing.T, tenant, typ string, data any) *bus.Delivery {
	t.Helper()
	ev, err := bus.NewEvent(typ, tenant, "test", data)
	require.NoError(t, err)
	r.seq++
	at := r.start.Add(time.Duration(r.seq) * time.Second)
	ev.SetTime(at)
	return &bus.Delivery{Event: ev, Tenant: tenant, Subject: "x." + tenant, StreamSeq: r.seq, Time: at}
}

// handle applies ds as one batch and requires every event to succeed.
func (r *rig) handle(t *testing.T, ds ...*bus.Delivery) {
	t.Helper()
	for i, err := range r.ix.Handle(context.Background(), ds) {
		require.NoError(t, err, "event %d (%s)", i, ds[i].Event.Type())
	}
}

// apply handles one event and returns its result.
func (r *rig) apply(t *testing.T, typ string, data any) (*bus.Delivery, result) {
	t.Helper()
	d := r.delivery(t, typ, data)
	r.handle(t, d)
	res, ok := r.out.byCause(t)[d.Event.ID()]
	require.True(t, ok, "no result for %s", typ)
	return d, res
}
