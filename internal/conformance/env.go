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
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// env is one scenario's world: a NATS server, the test database, a pool
// and a publisher.
type env struct {
	a      Adapter
	top    string // the top-level test, which child copies run
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
	e := &env{a: a, top: topTest(t), nats: n, dbURL: testenv.DatabaseURL(t), pool: testenv.Pool(t), pub: bus.NewPublisher(n.JS, reg), schema: reg}
	installFaults(t, e.pool)
	return e
}

// config is a copy's configuration: this scenario's NATS, dbURL (the test
// database, or a proxy in front of it), small batches, fast retries.
func (e *env) config(t *testing.T, dbURL string, batch int) config.Config {
	cfg := e.prodConfig(t, dbURL)
	cfg.BatchSize = batch
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = 5 * time.Second
	cfg.MaxDeliver = 5
	return cfg
}

// prodConfig is a copy's configuration with the runner at its production
// defaults (batch size, ack wait, shutdown grace, delivery budget; the
// fetch wait and backoff are not configurable): the settings a rolling
// restart or an outage meets in a deployment.
func (e *env) prodConfig(t *testing.T, dbURL string) config.Config {
	cfg := testenv.Config(t, e.nats.URL)
	cfg.DatabaseURL = dbURL
	// A killed copy's unpublished results are the relay's: publish them
	// within a second, not the production default's half minute, so the
	// results (and the reference, which may read them) are checked within
	// the suite's waits.
	cfg.RelayInterval = 200 * time.Millisecond
	cfg.RelayMinAge = time.Second
	return cfg
}

// startChild runs a copy with cfg in a separate process (see Run).
func (e *env) startChild(t *testing.T, cfg config.Config) Copy {
	t.Helper()
	return startChild(t, e.top, e.dbURL, cfg)
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

// republish stores evs again without Nats-Msg-Id, as a publisher that does
// not set it (or a redrive) does: JetStream keeps each copy at a new
// sequence.
func (e *env) republish(t *testing.T, evs []event.Event) {
	t.Helper()
	for _, ev := range evs {
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		m.Header.Del("Nats-Msg-Id")
		_, err = e.nats.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}
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
	testenv.Eventually(t, settle, func() bool { return e.applied(t, tenant) >= want }, "%s applied %d of %d events of %s; dead letters: %v",
		e.a.Consumer, e.applied(t, tenant), want, tenant, reasons(e.deadLetters(t, tenant)))
	require.Equal(t, want, e.applied(t, tenant), "no event applied twice or unknown")
}

// idle waits until the durable consumer has nothing pending or in hand:
// every copy stored in the stream has been delivered and settled.
func (e *env) idle(t *testing.T) {
	t.Helper()
	cons, err := e.nats.JS.Consumer(context.Background(), bus.StreamName, e.a.Consumer)
	require.NoError(t, err)
	testenv.Eventually(t, settle, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "every message of %s settled", e.a.Consumer)
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
// as a consumer leaves them out: the first occurrence of an id counts, at
// its sequence. Apply them in order to get a reference state.
func History(t *testing.T, js jetstream.JetStream, subjects []string, tenant string) []*bus.Delivery {
	t.Helper()
	var out []*bus.Delivery
	seen := map[string]bool{}
	for _, d := range Stream(t, js, subjects, tenant) {
		if seen[d.Event.ID()] {
			continue
		}
		seen[d.Event.ID()] = true
		out = append(out, d)
	}
	return out
}

// Stream reads every valid event of tenant on subjects (tenant token "*")
// in stream AGENTQ, in stream order, copies of one id included.
func Stream(t *testing.T, js jetstream.JetStream, subjects []string, tenant string) []*bus.Delivery {
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
	for pending := info.NumPending; pending > 0; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		meta, err := m.Metadata()
		require.NoError(t, err)
		pending = meta.NumPending
		if d, err := bus.Read(m, reg, 1<<20); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// lastSeq is the stream's last sequence.
func (e *env) lastSeq(t *testing.T) uint64 {
	t.Helper()
	s, err := e.nats.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// requireConsistent waits until the consumer's state of tenant equals the
// reference of the stream's history field by field, and until every
// result the history calls for is on the stream exactly once with the
// right content; ids names events left out of both (dead-lettered).
func (e *env) requireConsistent(t *testing.T, tenant string, ids ...string) {
	t.Helper()
	e.requireReference(t, tenant, ids...)
	e.requireResults(t, tenant, ids...)
}

// requireReference waits until the consumer's state of tenant equals the
// reference computed from the stream in stream order, field by field.
func (e *env) requireReference(t *testing.T, tenant string, ids ...string) {
	t.Helper()
	h := without(e.history(t, tenant), ids...)
	want := e.a.Reference(h)
	var got any
	deadline := time.Now().Add(30 * time.Second)
	for {
		if e.a.ReferenceReadsResults {
			// Results still on their way are facts still to come.
			h = without(e.history(t, tenant), ids...)
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

// requireResults waits until the results on the stream are those the
// history calls for (Adapter.ExpectedResults), exactly once each.
func (e *env) requireResults(t *testing.T, tenant string, ids ...string) {
	t.Helper()
	if e.a.ExpectedResults == nil {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		want := e.a.ExpectedResults(without(e.history(t, tenant), ids...))
		got := Stream(t, e.nats.JS, e.a.ResultSubjects, tenant)
		diff := e.compareResults(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("results of %s on the stream are not exactly those its inputs call for (%d expected, %d stored):\n%s", tenant, len(want), len(got), diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compareResults says how got (the result events stored, copies
// included) differs from want; "" when it does not.
func (e *env) compareResults(want []Result, got []*bus.Delivery) string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	stored := map[string]int{}
	byKey := map[string][]Result{}
	for _, d := range got {
		stored[d.Event.ID()]++
		if stored[d.Event.ID()] > 1 {
			continue // reported below, compared once
		}
		r := e.a.ReadResult(d.Event)
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	for _, id := range sortedKeys(stored) {
		if n := stored[id]; n > 1 {
			add("result %s stored %d times (a result is published exactly once)", id, n)
		}
	}
	final := map[string]Result{}
	for _, k := range sortedKeys(byKey) {
		rs := byKey[k]
		if !e.a.StateResults {
			// One result per input, and revisions (a decision the consumer
			// revised when an event earlier in the stream arrived late,
			// published whenever that was: before a delayed original too):
			// the last revision counts, else the one result.
			var last Result
			plain := 0
			for _, r := range rs {
				if !r.Revised {
					plain++
					if !last.Revised {
						last = r
					}
					continue
				}
				last = r
			}
			if plain > 1 {
				add("input %s has %d results, want one (and revisions): %+v", k, plain, rs)
			}
			if last.Revised {
				// Compared by content: a revision has an id of its own.
				last.Revised = false
				if w, ok := byKeyWant(want, k); ok {
					last.ID = w.ID
				}
			}
			final[k] = last
			continue
		}
		versions := map[int64]string{}
		newest := rs[0]
		for _, r := range rs {
			if id, ok := versions[r.Version]; ok && id != r.ID && !r.Revised {
				add("target %s has two results for state version %d: %s and %s", k, r.Version, id, r.ID)
			}
			versions[r.Version] = r.ID
			// rs is in stream order: a revision of the newest version
			// supersedes what came before it.
			if r.Version > newest.Version || r.Version == newest.Version && r.Revised {
				newest = r
			}
		}
		if newest.Revised {
			// Compared by content: its id derives from it.
			newest.ID, newest.Revised = "", false
			if w, ok := byKeyWant(want, k); ok {
				newest.ID = w.ID
			}
		}
		final[k] = newest
	}
	expected := map[string]Result{}
	for _, r := range want {
		expected[r.Key] = r
	}
	missing, unexpected, differ := 0, 0, 0
	for _, k := range sortedKeys(expected) {
		g, ok := final[k]
		switch {
		case !ok:
			if missing++; missing <= 5 {
				add("no result for %s, want %+v", k, expected[k])
			}
		case !equal(g, expected[k]):
			if differ++; differ <= 5 {
				add("result for %s differs:\n\tgot  %+v\n\twant %+v", k, g, expected[k])
			}
		}
	}
	for _, k := range sortedKeys(final) {
		if _, ok := expected[k]; !ok {
			if unexpected++; unexpected <= 5 {
				add("unexpected result for %s: %+v", k, final[k])
			}
		}
	}
	if missing+unexpected+differ > 0 {
		add("in all: %d missing, %d unexpected, %d different", missing, unexpected, differ)
	}
	return strings.Join(problems, "\n")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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

func (r *results) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]event.Event, len(r.msgs))
	for i, m := range r.msgs {
		out[i] = m.ev
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

// requireNoDeadLetters fails with every dead letter's reason.
func (e *env) requireNoDeadLetters(t *testing.T, tenant, why string) {
	t.Helper()
	dls := e.deadLetters(t, tenant)
	if len(dls) == 0 {
		return
	}
	var lines []string
	for _, r := range sortedKeys(dls) {
		for i, dl := range dls[r] {
			if i == 3 {
				lines = append(lines, fmt.Sprintf("  … %d more %s", len(dls[r])-3, r))
				break
			}
			lines = append(lines, fmt.Sprintf("  %s seq %d after %d deliveries: %s", r, dl.StreamSeq, dl.Deliveries, dl.Reason))
		}
	}
	t.Fatalf("%s: %d dead letters:\n%s", why, len(reasons(dls)), strings.Join(lines, "\n"))
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
		ALTER TABLE conformance_faults ADD COLUMN IF NOT EXISTS hold text[] NOT NULL DEFAULT '{}';
		ALTER TABLE conformance_faults ADD COLUMN IF NOT EXISTS slow text[] NOT NULL DEFAULT '{}';
		ALTER TABLE conformance_faults ADD COLUMN IF NOT EXISTS slow_ms integer NOT NULL DEFAULT 0;
		ALTER TABLE conformance_faults ADD COLUMN IF NOT EXISTS refuse text[] NOT NULL DEFAULT '{}';
		CREATE OR REPLACE FUNCTION conformance_fault() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE f conformance_faults%ROWTYPE;
		BEGIN
			SELECT * INTO f FROM conformance_faults WHERE tenant_id = NEW.tenant_id;
			IF FOUND THEN
				IF NEW.event_id = ANY (f.poison) THEN
					RAISE EXCEPTION 'conformance: poison event %', NEW.event_id USING ERRCODE = '22021';
				END IF;
				IF NEW.event_id = ANY (f.hold) THEN
					RAISE EXCEPTION 'conformance: held event %', NEW.event_id USING ERRCODE = '40P01';
				END IF;
				IF NEW.event_id = ANY (f.refuse) THEN
					-- Counted outside the transaction, which fails.
					PERFORM nextval('conformance_refused_' || NEW.tenant_id);
					RAISE EXCEPTION 'conformance: refused event %', NEW.event_id USING ERRCODE = '57P03';
				END IF;
				IF NEW.event_id = ANY (f.slow) THEN
					PERFORM pg_sleep(f.slow_ms / 1000.0);
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

// faults are the injected faults of one tenant's inbox inserts.
type faults struct {
	rate   float64       // share failing with a deadlock
	poison []string      // ids failing with a data error (permanent)
	hold   []string      // ids failing with a deadlock (transient) while held
	refuse []string      // ids failing as "cannot connect now": an outage for them alone
	slow   []string      // ids whose insert sleeps for delay
	delay  time.Duration // of the slow ones
}

// setFaults replaces tenant's injected faults with f.
func (e *env) setFaults(t *testing.T, tenant string, f faults) {
	t.Helper()
	list := func(ids []string) []string {
		if ids == nil {
			return []string{}
		}
		return ids
	}
	if len(f.refuse) > 0 {
		// The trigger counts refused inserts here (tenant ids are
		// [a-z0-9_-], testenv's [a-z0-9]).
		_, err := e.pool.Exec(context.Background(), `CREATE SEQUENCE IF NOT EXISTS conformance_refused_`+tenant)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = e.pool.Exec(context.Background(), `DROP SEQUENCE IF EXISTS conformance_refused_`+tenant)
		})
	}
	_, err := e.pool.Exec(context.Background(), `
		INSERT INTO conformance_faults (tenant_id, rate, poison, hold, slow, slow_ms, refuse) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tenant_id) DO UPDATE SET rate = excluded.rate, poison = excluded.poison, hold = excluded.hold,
			slow = excluded.slow, slow_ms = excluded.slow_ms, refuse = excluded.refuse`,
		tenant, f.rate, list(f.poison), list(f.hold), list(f.slow), f.delay.Milliseconds(), list(f.refuse))
	require.NoError(t, err)
}

// refused counts the inbox inserts of tenant refused so far: with batches
// of one, the deliveries of the refused events.
func (e *env) refused(t *testing.T, tenant string) int64 {
	t.Helper()
	var n int64
	var called bool
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT last_value, is_called FROM conformance_refused_`+tenant).Scan(&n, &called))
	if !called {
		return 0
	}
	return n
}

// ledgerReads makes reads of the delivery ledger fail (on false) or work
// again (on true), its records intact: copies read it with JetStream's
// direct get, which a stream not allowing direct gets leaves unanswered.
func (e *env) ledgerReads(t *testing.T, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := e.nats.JS.Stream(ctx, "KV_"+bus.LedgerBucket)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	// A handle opened before, as a running copy's is.
	probe, err := e.nats.JS.KeyValue(ctx, bus.LedgerBucket)
	require.NoError(t, err)
	cfg := info.Config
	cfg.AllowDirect = on
	_, err = e.nats.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	_, err = probe.Get(ctx, "conformance-probe")
	if on {
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "ledger reads work again")
	} else {
		require.Error(t, err)
		require.NotErrorIs(t, err, jetstream.ErrKeyNotFound, "ledger reads fail")
	}
}

// failures sums the failures (deliveries that failed for the event's own
// reasons) counted by copies in this process.
func failures(consumer string, copies ...Copy) float64 {
	var n float64
	for _, c := range copies {
		if p, ok := c.(interface {
			Counter(string, map[string]string) float64
		}); ok {
			n += p.Counter("agentq_event_failures_total", map[string]string{"consumer": consumer})
		}
	}
	return n
}

// hostPort is the database server's address in dbURL.
func hostPort(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// openPool opens a pool on dbURL (a proxy in front of the test database),
// closed at cleanup.
func openPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := database.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func without(ds []*bus.Delivery, ids ...string) []*bus.Delivery {
	if len(ids) == 0 {
		return ds
	}
	drop := map[string]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	out := ds[:0:0]
	for _, d := range ds {
		if !drop[d.Event.ID()] {
			out = append(out, d)
		}
	}
	return out
}

// byKeyWant finds the expected result of key k.
func byKeyWant(want []Result, k string) (Result, bool) {
	for _, r := range want {
		if r.Key == k {
			return r, true
		}
	}
	return Result{}, false
}
