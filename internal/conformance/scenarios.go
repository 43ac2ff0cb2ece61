package conformance

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// duplicates: every event published twice more — once more with its
// Nats-Msg-Id (JetStream drops it) and once without (stored again, so the
// consumer sees it twice) — after the first copies were applied.
func duplicates(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 200, 1)
	c := a.Start(t, e.config(t, e.dbURL, 50))
	defer c.Stop()
	e.publish(t, evs)
	e.waitApplied(t, tenant, len(evs))
	e.publish(t, evs) // same Nats-Msg-Id: dropped by JetStream
	for _, ev := range evs {
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		m.Header.Del("Nats-Msg-Id") // a publisher that does not set it
		_, err = e.nats.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}
	// The republished copies are acked once the consumer has seen them.
	cons, err := e.nats.JS.Consumer(context.Background(), bus.StreamName, a.Consumer)
	require.NoError(t, err)
	testenv.Eventually(t, settle, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "republished copies consumed")
	require.Equal(t, len(evs), e.applied(t, tenant))
	e.requireReference(t, tenant)
	require.Empty(t, e.deadLetters(t, tenant))
}

// twoCopiesWithFaults: two copies with small, different batches share the
// work; 1% of inbox inserts fail with a deadlock, and the database goes
// away for a while under one copy; the state equals the stream-order
// reference field by field.
func twoCopiesWithFaults(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	e.setFaults(t, tenant, 0.01)
	evs := a.Workload(t, tenant, 800, 2)
	proxy := testenv.StartProxy(t, hostPort(t, e.dbURL))
	c1 := a.Start(t, e.config(t, proxy.RewriteURL(t, e.dbURL), 7))
	defer c1.Stop()
	c2 := a.Start(t, e.config(t, e.dbURL, 13))
	defer c2.Stop()
	e.publish(t, evs[:400])
	testenv.Eventually(t, settle, func() bool { return e.applied(t, tenant) >= 100 }, "work under way")
	proxy.Down()
	e.publish(t, evs[400:])
	time.Sleep(1500 * time.Millisecond) // the outage lasts a while: this is its length, not a wait for a condition
	proxy.Up(t)
	e.waitApplied(t, tenant, len(evs))
	e.setFaults(t, tenant, 0)
	e.requireReference(t, tenant)
	require.Empty(t, e.deadLetters(t, tenant), "faults and outages dead-letter nothing")
}

// poison: one event whose inbox insert fails with a data error (as a NUL
// byte does in Postgres) sits among valid ones in one batch; only it is
// dead-lettered.
func poison(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 41, 3)
	bad := evs[17]
	e.setFaults(t, tenant, 0, bad.ID())
	e.publish(t, evs) // before the copy starts: one batch holds them all
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.waitApplied(t, tenant, len(evs)-1)
	var dls map[string][]bus.DeadLetter
	testenv.Eventually(t, 30*time.Second, func() bool { dls = e.deadLetters(t, tenant); return len(dls) > 0 }, "poison dead-lettered")
	require.Equal(t, []string{bus.ReasonPermanent}, reasons(dls))
	require.Equal(t, bad.ID(), dls[bus.ReasonPermanent][0].EventID)
	require.Contains(t, dls[bus.ReasonPermanent][0].Reason, "poison")
	e.setFaults(t, tenant, 0)
	want := e.a.Reference(without(e.history(t, tenant), bad.ID()))
	require.Equal(t, want, a.State(t, e.pool, tenant))
}

// kills: copies are killed abruptly at random points while events flow
// and restarted; nothing is lost or applied twice.
func kills(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 1500, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < len(evs); i += 50 {
			e.publish(t, evs[i:min(i+50, len(evs))])
			time.Sleep(20 * time.Millisecond) // pacing of the traffic, not a wait
		}
	}()
	killed := 0
	for done := false; !done; {
		c := a.Start(t, e.config(t, e.dbURL, 1+rng.IntN(60)))
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond) // a random point to die at
		c.Kill()
		killed++
		done = killed >= 20 && e.applied(t, tenant) >= len(evs)/2
	}
	wg.Wait()
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.waitApplied(t, tenant, len(evs))
	e.requireReference(t, tenant)
	require.Empty(t, e.deadLetters(t, tenant), "kills dead-letter nothing")
	t.Logf("%d abrupt kills", killed)
}

// rebuildDuringTraffic: two copies run and traffic flows; a rebuild of the
// tenant resets its state and re-applies the history while both copies keep
// applying new events. Nothing is published while it runs, and the final
// state equals the reference.
func rebuildDuringTraffic(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	other := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 3000, 5)
	others := a.Workload(t, other, 200, 6)
	c1 := a.Start(t, e.config(t, e.dbURL, 50))
	defer c1.Stop()
	c2 := a.Start(t, e.config(t, e.dbURL, 50))
	defer c2.Stop()
	e.publish(t, evs[:2400])
	e.publish(t, others)
	e.waitApplied(t, tenant, 2400)
	e.waitApplied(t, other, len(others))
	before := a.State(t, e.pool, other)

	res := e.subscribeResults(t, tenant)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // live traffic during the rebuild
		defer wg.Done()
		for i := 2400; i < len(evs) && !stop.Load(); i += 20 {
			e.publish(t, evs[i:min(i+20, len(evs))])
			time.Sleep(30 * time.Millisecond) // pacing of the traffic, not a wait
		}
	}()
	time.Sleep(200 * time.Millisecond) // let traffic start flowing first
	appliedAtStart := e.applied(t, tenant)
	ctx, cancel := background()
	defer cancel()
	start := time.Now()
	rep, err := replay.Rebuild(ctx, e.nats.JS, e.pool, e.schema, a.Rebuild(e.pool), replay.Options{Tenant: tenant, BatchSize: 200, Log: testenv.Logger(t)})
	end := time.Now()
	require.NoError(t, err)
	wg.Wait()
	require.Empty(t, rep.Skipped)
	require.GreaterOrEqual(t, rep.Events, 2400)
	// Results of batches that committed just before the rebuild began may
	// still be on their way when it begins (seconds on a loaded machine):
	// early in the rebuild, only results of events up to its horizon may
	// arrive; after that grace, none at all.
	const grace = 2 * time.Second
	seqOf := map[string]uint64{}
	for _, d := range e.history(t, tenant) {
		seqOf[d.Event.ID()] = d.StreamSeq
	}
	early := start.Add(grace)
	if early.After(end) {
		early = end // after the rebuild, live copies publish again
	}
	for _, ev := range res.between(start, early) {
		cause, _ := ev.Extensions()[bus.ExtCausation].(string)
		require.LessOrEqual(t, seqOf[cause], rep.Horizon, "a result of an event after the rebuild's horizon was published during the rebuild: %s", ev.ID())
	}
	published := res.between(early, end)
	require.Empty(t, published, "nothing published during the rebuild (%s)", end.Sub(start))
	e.waitApplied(t, tenant, len(evs))
	require.Greater(t, len(evs), appliedAtStart, "traffic flowed during the rebuild")
	e.requireReference(t, tenant)
	require.Equal(t, before, a.State(t, e.pool, other), "another tenant is untouched")
	require.Empty(t, e.deadLetters(t, tenant))
	t.Logf("rebuild of %d events took %s; %d results published over the test", rep.Events, end.Sub(start), res.count())
}

// twoTenants: tenants a and b send the same event ids; both are applied
// and both get results.
func twoTenants(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	ta, tb := testenv.Tenant(t), testenv.Tenant(t)
	evsA := a.Workload(t, ta, 60, 7)
	evsB := a.Workload(t, tb, 60, 7)
	for i := range evsB {
		evsB[i].SetID(evsA[i].ID())
	}
	resA, resB := e.subscribeResults(t, ta), e.subscribeResults(t, tb)
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.publish(t, append(append(evsA[:0:0], evsA...), evsB...))
	e.waitApplied(t, ta, len(evsA))
	e.waitApplied(t, tb, len(evsB))
	e.requireReference(t, ta)
	e.requireReference(t, tb)
	if len(a.ResultSubjects) > 0 {
		testenv.Eventually(t, 30*time.Second, func() bool { return resA.count() > 0 && resB.count() > 0 }, "both tenants get results")
	}
}

// badInputs: each kind of bad message is dead-lettered with its reason;
// valid events around them are applied.
func badInputs(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 20, 8)
	good, err := bus.Encode(evs[0])
	require.NoError(t, err)
	variant := func(mutate func(m *nats.Msg)) *nats.Msg {
		m := nats.NewMsg(good.Subject)
		for k, v := range good.Header {
			m.Header[k] = append([]string(nil), v...)
		}
		m.Header.Del("Nats-Msg-Id")
		m.Header.Set("ce-id", "bad-"+testenv.Tenant(t))
		m.Data = append([]byte(nil), good.Data...)
		mutate(m)
		return m
	}
	cases := map[string]*nats.Msg{
		bus.ReasonDecode + "/not json":     variant(func(m *nats.Msg) { m.Data = []byte("this is not json") }),
		bus.ReasonDecode + "/nul in id":    variant(func(m *nats.Msg) { m.Header.Set("ce-id", "run-1\x00step-0") }),
		bus.ReasonDecode + "/long id":      variant(func(m *nats.Msg) { m.Header.Set("ce-id", strings.Repeat("x", 3800)) }),
		bus.ReasonDecode + "/huge headers": variant(func(m *nats.Msg) { m.Header.Set("X-Padding", strings.Repeat("p", 30<<10)) }),
		bus.ReasonDecode + "/spec 2.0":     variant(func(m *nats.Msg) { m.Header.Set("ce-specversion", "2.0") }),
		bus.ReasonDecode + "/bad utf-8":    variant(func(m *nats.Msg) { m.Data = []byte("{\"tool_name\":\"\xff\xfe\"}") }),
		bus.ReasonSchema + "/schema":       variant(func(m *nats.Msg) { m.Data = []byte(`{"unexpected":true}`) }),
		bus.ReasonOversize + "/oversize": variant(func(m *nats.Msg) {
			m.Data = []byte(`{"pad":"` + strings.Repeat("a", 1<<20) + `"}`)
		}),
		bus.ReasonTenantMismatch + "/wrong tenant": variant(func(m *nats.Msg) { m.Header.Set("ce-tenantid", "someone-else") }),
	}
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	want := map[string]int{}
	i := 0
	for name, m := range cases {
		want[strings.SplitN(name, "/", 2)[0]]++
		e.publish(t, evs[i:i+1])
		i++
		_, err := e.nats.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err, name)
	}
	e.publish(t, evs[i:])
	e.waitApplied(t, tenant, len(evs))
	var dls map[string][]bus.DeadLetter
	testenv.Eventually(t, 30*time.Second, func() bool {
		dls = e.deadLetters(t, tenant)
		return len(reasons(dls)) >= len(cases)
	}, "every bad input dead-lettered")
	got := map[string]int{}
	for r, l := range dls {
		got[r] = len(l)
		for _, dl := range l {
			require.NotEmpty(t, dl.Reason)
			require.NotContains(t, dl.Reason, "\n")
		}
	}
	require.Equal(t, want, got)
	e.requireReference(t, tenant)
}

func without(ds []*bus.Delivery, id string) []*bus.Delivery {
	out := ds[:0:0]
	for _, d := range ds {
		if d.Event.ID() != id {
			out = append(out, d)
		}
	}
	return out
}
