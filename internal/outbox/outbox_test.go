package outbox_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// validData is a quality.changed payload its schema accepts.
var validData = map[string]any{
	"target": "tool", "tool_name": "x", "quality_score": 0.5, "success_rate": 1, "total_calls": 1,
}

type env struct {
	nats   *testenv.NATS
	pool   *pgxpool.Pool
	pub    *bus.Publisher
	ob     *outbox.Outbox
	tenant string
}

// setup gives each test its own NATS server, because Flush publishes every
// outbox row in the database, not only this test's.
func setup(t *testing.T) *env {
	t.Helper()
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pool := outboxPool(t)
	pub := bus.NewPublisher(n.JS, reg)
	e := &env{nats: n, pool: pool, pub: pub, ob: outbox.New(pool, pub, testenv.Logger(t)), tenant: testenv.Tenant(t)}
	t.Cleanup(func() {
		// Leave no row of ours behind for another test's Flush.
		_, _ = pool.Exec(context.Background(), `DELETE FROM outbox WHERE tenant_id = $1`, e.tenant)
	})
	return e
}

// outboxPool opens the test database. The PGlite dev database belongs to
// this test binary alone; a server at AGENTQ_DATABASE_URL is shared with
// other packages' tests running at the same time, whose outbox rows a
// global Flush here would publish to this test's NATS and delete, so there
// the tests get a database of their own.
func outboxPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	base := os.Getenv("AGENTQ_DATABASE_URL")
	if base == "" {
		return testenv.Pool(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, database.Migrate(ctx, dbURL, zerolog.Nop()))
	pool, err := database.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // runs before the DROP
	return pool
}

// result builds the scorer's quality.changed result of a fresh
// tool.executed event of the test's tenant.
func (e *env) result(t *testing.T, data any) event.Event {
	t.Helper()
	cause, err := bus.NewEvent(bus.Type("tool", "executed"), e.tenant, "test",
		map[string]any{"tool_name": "x", "success": true})
	require.NoError(t, err)
	ev, err := bus.NewResult("scorer", bus.Type("quality", "changed"), cause, data)
	require.NoError(t, err)
	return ev
}

// add stores evs in the outbox in a transaction that commits or rolls back.
func (e *env) add(t *testing.T, commit bool, evs ...event.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	err = outbox.Add(ctx, tx, evs...)
	if err != nil || !commit {
		_ = tx.Rollback(ctx) // never leave a transaction open: PGlite would block every other connection
	} else {
		require.NoError(t, tx.Commit(ctx))
	}
	require.NoError(t, err)
}

// rows returns the ids of the tenant's outbox rows.
func (e *env) rows(t *testing.T) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id FROM outbox WHERE tenant_id = $1 ORDER BY id`, e.tenant)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func (e *env) subject() string { return "quality.changed." + e.tenant }

// stored returns how many messages stream AGENTQ holds on the tenant's
// quality.changed subject.
func (e *env) stored(t *testing.T) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := e.nats.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(e.subject()))
	require.NoError(t, err)
	return info.State.Subjects[e.subject()]
}

// requireStored checks that the tenant's last quality.changed message is ev.
func (e *env) requireStored(t *testing.T, ev event.Event) {
	t.Helper()
	ctx := context.Background()
	s, err := e.nats.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctx, e.subject())
	require.NoError(t, err)
	require.Equal(t, bus.MsgID(bus.Tenant(ev), ev.ID()), m.Header.Get("Nats-Msg-Id"), "tenant-scoped message id")
	got, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, ev.ID(), got.ID())
	require.Equal(t, ev.Type(), got.Type())
	require.Equal(t, bus.Causation(ev), bus.Causation(got))
	require.JSONEq(t, string(ev.Data()), string(got.Data()))
}

// TestSendPublishesAndDeletes: Send deletes the row at once, or marks it for
// deletion by the outbox's next Flush or Queue; either way the result is
// published once and never again.
func TestSendPublishesAndDeletes(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ev := e.result(t, validData)
	e.add(t, true, ev)
	require.Equal(t, []string{ev.ID()}, e.rows(t))

	require.NoError(t, e.ob.Send(ctx, []event.Event{ev}))
	require.Equal(t, uint64(1), e.stored(t))
	e.requireStored(t, ev)

	n, err := e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "a sent result is not relayed again")
	require.Empty(t, e.rows(t), "an acked result leaves the outbox")
	require.Equal(t, uint64(1), e.stored(t))
}

// TestFlushPublishesCrashLeftovers: the transaction committed but the
// process died before Send.
func TestFlushPublishesCrashLeftovers(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ev := e.result(t, validData)
	e.add(t, true, ev)

	// A row younger than minAge may still be in its writer's hands.
	n, err := e.ob.Flush(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []string{ev.ID()}, e.rows(t))
	require.Zero(t, e.stored(t))

	n, err = e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(1), e.stored(t))
	e.requireStored(t, ev)
	require.Empty(t, e.rows(t))

	n, err = e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left to publish")
	require.Equal(t, uint64(1), e.stored(t))
}

// TestRepublishIsStoredOnce: a result published once and then again by
// Flush keeps its deterministic id, and JetStream's duplicate window stores
// it once; the relayed row is deleted all the same.
func TestRepublishIsStoredOnce(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T, e *env, ev event.Event)
	}{
		{"published, then the process died before deleting the row", func(t *testing.T, e *env, ev event.Event) {
			e.add(t, true, ev)
			_, err := e.pub.Publish(context.Background(), ev)
			require.NoError(t, err)
		}},
		{"sent, then the same result added again", func(t *testing.T, e *env, ev event.Event) {
			ctx := context.Background()
			e.add(t, true, ev)
			require.NoError(t, e.ob.Send(ctx, []event.Event{ev}))
			_, err := e.ob.Flush(ctx, time.Hour) // settle Send's deletion, publish nothing
			require.NoError(t, err)
			require.Empty(t, e.rows(t))
			e.add(t, true, ev)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			ev := e.result(t, validData)
			tc.first(t, e, ev)
			require.Equal(t, uint64(1), e.stored(t))
			require.Equal(t, []string{ev.ID()}, e.rows(t))

			n, err := e.ob.Flush(context.Background(), 0)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Empty(t, e.rows(t), "a duplicate ack deletes the row too")
			require.Equal(t, uint64(1), e.stored(t))
			e.requireStored(t, ev)
		})
	}
}

func TestRolledBackAddLeavesNothing(t *testing.T) {
	e := setup(t)
	ev := e.result(t, validData)
	e.add(t, false, ev)
	require.Empty(t, e.rows(t))
	n, err := e.ob.Flush(context.Background(), 0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, e.stored(t))
}

// TestSchemaInvalidResultStays records what happens to a result whose data
// fails its schema: the publisher refuses it before it leaves, Send reports
// a permanent error and keeps the row, and every later Flush picks the row
// up and fails again, so the relay retries it forever. A valid result in
// the same batch is still published and its row deleted.
// A result that fails its own schema can never be published: Send reports
// it as permanent and its row is removed (with an error log) instead of
// being retried forever and holding up the relay; the valid result beside it
// is published.
func TestSchemaInvalidResultIsRemoved(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	bad := e.result(t, map[string]any{"target": "bogus"})
	good := e.result(t, validData)
	e.add(t, true, bad, good)

	err := e.ob.Send(ctx, []event.Event{bad, good})
	require.Error(t, err)
	require.True(t, bus.IsPermanent(err), "%v", err)
	require.Equal(t, uint64(1), e.stored(t))
	e.requireStored(t, good)

	n, err := e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, e.rows(t), "both rows gone: one published, one unpublishable")
	require.Equal(t, uint64(1), e.stored(t), "the invalid result never reached the stream")
}

// Queue deletes the rows of results published earlier before it stores new
// ones, so a result stored again under the same id (a replay re-deriving it)
// is not deleted as already published: its row survives until it is sent.
func TestQueueKeepsAResultStoredAgain(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ev := e.result(t, validData)
	e.add(t, true, ev)
	require.NoError(t, e.ob.Send(ctx, []event.Event{ev})) // published; its row awaits deletion

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	b := &pgx.Batch{}
	require.NoError(t, e.ob.Queue(b, ev))
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []string{ev.ID()}, e.rows(t), "the re-stored result is still in the outbox")

	// The next Queue (another batch) deletes the row once it is sent again.
	require.NoError(t, e.ob.Send(ctx, []event.Event{ev}))
	tx, err = e.pool.Begin(ctx)
	require.NoError(t, err)
	b = &pgx.Batch{}
	require.NoError(t, e.ob.Queue(b))
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.NoError(t, tx.Commit(ctx))
	require.Empty(t, e.rows(t))
}

// countingPublisher counts the publishes it passes on to the real one.
type countingPublisher struct {
	outbox.Publisher
	n atomic.Int64
}

func (c *countingPublisher) PublishAsync(ev event.Event) (jetstream.PubAckFuture, error) {
	c.n.Add(1)
	return c.Publisher.PublishAsync(ev)
}

// Two relays (one per running copy) share crash leftovers: each row is
// published by one of them, never both.
func TestTwoRelaysPublishEachLeftoverOnce(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	var evs []event.Event
	for range 200 {
		evs = append(evs, e.result(t, validData))
	}
	e.add(t, true, evs...)
	pa, pb := &countingPublisher{Publisher: e.pub}, &countingPublisher{Publisher: e.pub}
	a, b := outbox.New(e.pool, pa, testenv.Logger(t)), outbox.New(e.pool, pb, testenv.Logger(t))
	var wg sync.WaitGroup
	var na, nb int
	var ea, eb error
	wg.Add(2)
	go func() { defer wg.Done(); na, ea = a.Flush(ctx, 0) }()
	go func() { defer wg.Done(); nb, eb = b.Flush(ctx, 0) }()
	wg.Wait()
	require.NoError(t, ea)
	require.NoError(t, eb)
	require.Equal(t, len(evs), na+nb, "every leftover published")
	require.Equal(t, int64(len(evs)), pa.n.Load()+pb.n.Load(), "and by one relay only")
	require.Empty(t, e.rows(t))
	require.Equal(t, uint64(len(evs)), e.stored(t))
}

// TestRelayHoldsResultsOfATenantBeingRebuilt: while a rebuild of the
// scorer's state of the tenant is recorded, the relay leaves the scorer's
// rows of the tenant alone (another consumer's, or another tenant's, go
// out as usual); Held and Drop let the rebuild remove those already
// published; once the record is gone the relay publishes the rest.
func TestRelayHoldsResultsOfATenantBeingRebuilt(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	kept, published := e.result(t, validData), e.result(t, validData)
	cause, err := bus.NewEvent(bus.Type("tool", "executed"), e.tenant, "test", map[string]any{"tool_name": "x", "success": true})
	require.NoError(t, err)
	other, err := bus.NewResult("other", bus.Type("quality", "changed"), cause, validData)
	require.NoError(t, err)
	e.add(t, true, kept, published, other)
	_, err = e.pool.Exec(ctx, `INSERT INTO rebuilds (consumer, tenant_id, horizon) VALUES ('scorer', $1, 1)`, e.tenant)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = e.pool.Exec(ctx, `DELETE FROM rebuilds WHERE tenant_id = $1`, e.tenant) })

	n, err := e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the other consumer's result")
	e.requireStored(t, other)

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	held, err := outbox.Held(ctx, tx, "scorer", e.tenant)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{kept.ID(), published.ID()}, held)
	require.NoError(t, outbox.Drop(ctx, tx, []string{published.ID()}))
	_, err = tx.Exec(ctx, `DELETE FROM rebuilds WHERE consumer = 'scorer' AND tenant_id = $1`, e.tenant)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	n, err = e.ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the held result, once its rebuild is over")
	e.requireStored(t, kept)
	require.Equal(t, uint64(2), e.stored(t))
	require.Empty(t, e.rows(t))
}

// failingPublisher refuses publishes while fail is set, as a connection
// that is down does.
type failingPublisher struct {
	outbox.Publisher
	fail atomic.Bool
}

func (f *failingPublisher) PublishAsync(ev event.Event) (jetstream.PubAckFuture, error) {
	if f.fail.Load() {
		return nil, nats.ErrConnectionClosed
	}
	return f.Publisher.PublishAsync(ev)
}

// TestPostPublishesWithoutWaiting: Post publishes and returns; the row of
// an acked result is deleted by the next Queue, and never relayed; a result
// whose publish failed stays for the relay, which publishes it once.
func TestPostPublishesWithoutWaiting(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pub := &failingPublisher{Publisher: e.pub}
	ob := outbox.New(e.pool, pub, testenv.Logger(t))
	queue := func() {
		tx, err := e.pool.Begin(ctx)
		require.NoError(t, err)
		b := &pgx.Batch{}
		require.NoError(t, ob.Queue(b))
		if b.Len() > 0 {
			require.NoError(t, tx.SendBatch(ctx, b).Close())
		}
		require.NoError(t, tx.Commit(ctx))
	}

	posted := e.result(t, validData)
	e.add(t, true, posted)
	require.NoError(t, ob.Post([]event.Event{posted}))
	testenv.Eventually(t, 10*time.Second, func() bool { return e.stored(t) == 1 }, "the posted result is stored")
	e.requireStored(t, posted)
	testenv.Eventually(t, 10*time.Second, func() bool { queue(); return len(e.rows(t)) == 0 }, "the acked result's row is deleted by a later Queue")

	failed := e.result(t, validData)
	e.add(t, true, failed)
	pub.fail.Store(true)
	require.Error(t, ob.Post([]event.Event{failed}))
	queue()
	require.Equal(t, []string{failed.ID()}, e.rows(t), "a result not published stays for the relay")
	pub.fail.Store(false)
	n, err := ob.Flush(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the relay publishes it")
	require.Empty(t, e.rows(t))
	require.Equal(t, uint64(2), e.stored(t), "each result stored once")
	e.requireStored(t, failed)
}
