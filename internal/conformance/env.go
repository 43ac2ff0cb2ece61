package conformance

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// env is one scenario's world: a NATS server, the test database, a pool
// and a publisher.
type env struct {
	a      Adapter
	nats   *testenv.NATS
	dbURL  string
	pool   *pgxpool.Pool
	pub    *bus.Publisher
	schema *schemas.Registry
}

func newEnv(t *testing.T, a Adapter) *env {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	n := testenv.StartNATS(t)
	e := &env{a: a, nats: n, dbURL: testenv.DatabaseURL(t), pool: testenv.Pool(t), pub: bus.NewPublisher(n.JS, reg), schema: reg}
	installFaults(t, e.pool)
	return e
}

// config is a copy's configuration: this scenario's NATS, dbURL (the test
// database, or a proxy in front of it), small batches, fast retries.
func (e *env) config(t *testing.T, dbURL string, batch int) config.Config {
	cfg := testenv.Config(t, e.nats.URL)
	cfg.DatabaseURL = dbURL
	cfg.BatchSize = batch
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = 5 * time.Second
	cfg.MaxDeliver = 5
	// A killed copy's unpublished results are the relay's: publish them
	// within a second, not the production default's half minute, so the
	// reference (which reads results) sees them within its wait.
	cfg.RelayInterval = 200 * time.Millisecond
	cfg.RelayMinAge = time.Second
	return cfg
}

func (e *env) publish(t *testing.T, evs []event.Event) {
	t.Helper()
	for _, ev := range evs {
		_, err := e.pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.pub.Flush(ctx))
}

// applied counts the consumer's inbox rows of tenant: the events applied.
func (e *env) applied(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE consumer = $1 AND tenant_id = $2`, e.a.Consumer, tenant).Scan(&n)
	require.NoError(t, err)
	return n
}

func (e *env) waitApplied(t *testing.T, tenant string, want int) {
	t.Helper()
	testenv.Eventually(t, settle, func() bool { return e.applied(t, tenant) >= want }, "%s applied %d of %d events of %s", e.a.Consumer, e.applied(t, tenant), want, tenant)
	require.Equal(t, want, e.applied(t, tenant), "no event applied twice or unknown")
}

// history reads tenant's input events back from the stream in stream
// order, as the consumer receives them; a republished copy of an id
// already seen is left out, as the inbox leaves it out.
func (e *env) history(t *testing.T, tenant string) []*bus.Delivery {
	subjects := e.a.Subjects
	if e.a.ReferenceReadsResults {
		subjects = append(append([]string{}, subjects...), e.a.ResultSubjects...)
	}
	return History(t, e.nats.JS, subjects, tenant)
}

// History reads tenant's events on subjects (tenant token "*") back from
// stream AGENTQ in stream order, decoded and validated as a runner does;
// invalid ones and republished copies of an id already seen are left out,
// as a consumer leaves them out. Apply them in order to get a reference
// state.
func History(t *testing.T, js jetstream.JetStream, subjects []string, tenant string) []*bus.Delivery {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := background()
	defer cancel()
	filter := make([]string, len(subjects))
	for i, s := range subjects {
		filter[i] = strings.TrimSuffix(s, "*") + tenant
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: filter})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	var out []*bus.Delivery
	seen := map[string]bool{}
	for pending := info.NumPending; pending > 0; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		meta, err := m.Metadata()
		require.NoError(t, err)
		pending = meta.NumPending
		d, err := bus.Read(m, reg, 1<<20)
		if err != nil || seen[d.Event.ID()] {
			continue
		}
		seen[d.Event.ID()] = true
		out = append(out, d)
	}
	return out
}

// requireReference waits until the consumer's state of tenant equals the
// reference computed from the stream in stream order, field by field.
func (e *env) requireReference(t *testing.T, tenant string) {
	t.Helper()
	h := e.history(t, tenant)
	want := e.a.Reference(h)
	var got any
	deadline := time.Now().Add(30 * time.Second)
	for {
		if e.a.ReferenceReadsResults {
			// Results still on their way are facts still to come.
			h = e.history(t, tenant)
			want = e.a.Reference(h)
		}
		got = e.a.State(t, e.pool, tenant)
		if equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, want, got, "state of %s equals the events applied in stream order%s", tenant, e.missingResults(h))
}

// missingResults says which inputs in h have no result in h, when the
// reference reads results: a reference that decides those itself may
// differ from what live processing decided, and this is the first thing
// to know about such a failure.
func (e *env) missingResults(h []*bus.Delivery) string {
	if !e.a.ReferenceReadsResults {
		return ""
	}
	result := func(d *bus.Delivery) bool { return d.Event.Source() == "agentq/"+e.a.Consumer }
	caused := map[string]bool{}
	for _, d := range h {
		if result(d) {
			caused[bus.Causation(d.Event)] = true
		}
	}
	var missing []string
	for _, d := range h {
		if !result(d) && !caused[d.Event.ID()] {
			missing = append(missing, d.Event.ID())
		}
	}
	// Not every input has a result (read-model updates may not): this is
	// a lead, not a verdict.
	return fmt.Sprintf("; %d inputs have no result in the stream (none due, dead-lettered, or not yet published): %s",
		len(missing), strings.Join(missing[:min(len(missing), 10)], ", "))
}

func equal(a, b any) bool { return assert.ObjectsAreEqual(a, b) }

// results subscribes to tenant's result subjects and records what arrives.
type results struct {
	mu   sync.Mutex
	msgs []received
}

type received struct {
	at time.Time
	ev event.Event
}

func (e *env) subscribeResults(t *testing.T, tenant string) *results {
	t.Helper()
	r := &results{}
	for _, s := range e.a.ResultSubjects {
		sub, err := e.nats.NC.Subscribe(strings.TrimSuffix(s, "*")+tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.msgs = append(r.msgs, received{time.Now(), ev})
			r.mu.Unlock()
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, e.nats.NC.Flush())
	return r
}

func (r *results) between(from, to time.Time) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, m := range r.msgs {
		if !m.at.Before(from) && !m.at.After(to) {
			out = append(out, m.ev)
		}
	}
	return out
}

func (r *results) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// deadLetters returns the dead letters of tenant's events, by reason.
func (e *env) deadLetters(t *testing.T, tenant string) map[string][]bus.DeadLetter {
	t.Helper()
	out := map[string][]bus.DeadLetter{}
	for _, dl := range testenv.DeadLetters(t, e.nats.JS) {
		if strings.HasSuffix(dl.Subject, "."+tenant) {
			out[dl.ReasonCode] = append(out[dl.ReasonCode], dl)
		}
	}
	return out
}

func reasons(m map[string][]bus.DeadLetter) []string {
	var out []string
	for r, dls := range m {
		for range dls {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// installFaults adds the fault-injection trigger to the test database's
// inbox (idempotent; serialised, since test binaries may share a server).
func installFaults(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7286001)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS conformance_faults (
			tenant_id text PRIMARY KEY,
			rate      double precision NOT NULL DEFAULT 0,
			poison    text[] NOT NULL DEFAULT '{}'
		);
		CREATE OR REPLACE FUNCTION conformance_fault() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE f conformance_faults%ROWTYPE;
		BEGIN
			SELECT * INTO f FROM conformance_faults WHERE tenant_id = NEW.tenant_id;
			IF FOUND THEN
				IF NEW.event_id = ANY (f.poison) THEN
					RAISE EXCEPTION 'conformance: poison event %', NEW.event_id USING ERRCODE = '22021';
				END IF;
				IF random() < f.rate THEN
					RAISE EXCEPTION 'conformance: injected deadlock' USING ERRCODE = '40P01';
				END IF;
			END IF;
			RETURN NEW;
		END $$;
		DROP TRIGGER IF EXISTS conformance_fault ON inbox;
		CREATE TRIGGER conformance_fault BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION conformance_fault();`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// setFaults makes inbox inserts of tenant fail with a deadlock at rate and
// with a data error for the poison ids.
func (e *env) setFaults(t *testing.T, tenant string, rate float64, poison ...string) {
	t.Helper()
	if poison == nil {
		poison = []string{}
	}
	_, err := e.pool.Exec(context.Background(), `
		INSERT INTO conformance_faults (tenant_id, rate, poison) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET rate = excluded.rate, poison = excluded.poison`, tenant, rate, poison)
	require.NoError(t, err)
}

// hostPort is the database server's address in dbURL.
func hostPort(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}
