package conformance

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/cli"
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
	e.republish(t, evs)
	// The republished copies are acked once the consumer has seen them.
	e.idle(t)
	require.Equal(t, len(evs), e.applied(t, tenant))
	e.requireConsistent(t, tenant)
	require.Empty(t, e.deadLetters(t, tenant))
}

// copyBeforeOriginal: some events' first deliveries fail (a transient
// fault held on them), and copies of them republished without
// Nats-Msg-Id — as a publisher that does not set it, a redrive or an
// outbox relay after the duplicate window store them — are applied while
// the originals wait for their next delivery. The first occurrence in the
// stream is what counts, at its sequence, whichever copy commits first.
func copyBeforeOriginal(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 240, 11)
	c := a.Start(t, e.config(t, e.dbURL, 20))
	defer c.Stop()
	e.publish(t, evs[:100])
	e.waitApplied(t, tenant, 100)
	var held []event.Event
	for i := 100; i < 140; i += 4 {
		held = append(held, evs[i])
	}
	e.setFaults(t, tenant, faults{hold: ids(held)})
	base := failures(a.Consumer, c)
	e.publish(t, evs[100:140])
	// Three failed deliveries each: the originals' next delivery is then
	// 5 s away (the runner's backoff), time for their copies to commit.
	testenv.Eventually(t, time.Minute, func() bool { return failures(a.Consumer, c)-base >= float64(3*len(held)) },
		"the held originals failed three times each (failures counted: %v; Start must return a copy that counts them, like *testenv.Process)", failures(a.Consumer, c)-base)
	e.setFaults(t, tenant, faults{})
	e.republish(t, held)
	e.publish(t, evs[140:])
	e.waitAll(t, tenant, len(evs), "copies and originals")
	e.idle(t) // the originals came back and were recognised
	e.requireConsistent(t, tenant)
}

// twoCopiesWithFaults: two copies with small, different batches share the
// work; 1% of inbox inserts fail with a deadlock, and the database goes
// away for a while under one copy; the state equals the stream-order
// reference field by field.
func twoCopiesWithFaults(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	e.setFaults(t, tenant, faults{rate: 0.01})
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
	e.waitAll(t, tenant, len(evs), "faults and outages")
	e.setFaults(t, tenant, faults{})
	e.requireConsistent(t, tenant)
}

// poison: one event whose inbox insert fails with a data error (as a NUL
// byte does in Postgres) sits among valid ones in one batch; only it is
// dead-lettered. After the cause is fixed, `agentq dlq --redrive` stores it
// again at a new sequence; it is applied, and counts at its original place
// in the stream.
func poison(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 41, 3)
	bad := evs[17]
	e.setFaults(t, tenant, faults{poison: []string{bad.ID()}})
	e.publish(t, evs) // before the copy starts: one batch holds them all
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.waitApplied(t, tenant, len(evs)-1)
	var dls map[string][]bus.DeadLetter
	testenv.Eventually(t, 30*time.Second, func() bool { dls = e.deadLetters(t, tenant); return len(dls) > 0 }, "poison dead-lettered")
	require.Equal(t, []string{bus.ReasonPermanent}, reasons(dls))
	require.Equal(t, bad.ID(), dls[bus.ReasonPermanent][0].EventID)
	require.Contains(t, dls[bus.ReasonPermanent][0].Reason, "poison")
	e.requireConsistent(t, tenant, bad.ID())

	e.setFaults(t, tenant, faults{})
	e.redrive(t)
	e.waitApplied(t, tenant, len(evs))
	require.Empty(t, e.deadLetters(t, tenant), "the redriven event left the DLQ and was applied")
	e.requireConsistent(t, tenant)
}

// redrive runs `agentq dlq --redrive` for the consumer.
func (e *env) redrive(t *testing.T) {
	t.Helper()
	var out bytes.Buffer
	env := map[string]string{"AGENTQ_NATS_URL": e.nats.URL, "AGENTQ_DATABASE_URL": e.dbURL, "AGENTQ_LOG_LEVEL": "warn"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.Run(ctx, cli.Env{Args: []string{"dlq", "--redrive", "--consumer", e.a.Consumer}, Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	require.Zero(t, code, "agentq dlq --redrive: %s", out.String())
}

// kills: copies run as separate processes and are killed with SIGKILL at
// random points while events flow — their transactions and NATS
// connections cut mid-flight, nothing they held settled — and replaced;
// nothing is lost, applied twice or dead-lettered.
func kills(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 1500, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	wait := e.flow(t, evs, 50, 20*time.Millisecond)
	// Two copies at a time: one is killed while the other works, then a
	// new one takes its place.
	running := e.startChild(t, e.config(t, e.dbURL, 1+rng.IntN(60)))
	killed := 0
	var at []int // events applied when each copy was killed: work was under way
	for done := false; !done; {
		next := e.startChild(t, e.config(t, e.dbURL, 1+rng.IntN(60)))
		time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond) // a random point to die at
		running.Kill()
		running = next
		killed++
		at = append(at, e.applied(t, tenant))
		done = killed >= 12 && at[len(at)-1] >= len(evs)/2
	}
	wait()
	running.Kill()
	killed++
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.waitAll(t, tenant, len(evs), "kills")
	e.requireConsistent(t, tenant)
	t.Logf("%d copies killed with SIGKILL; events applied at each kill: %v", killed, at)
}

// flow publishes evs in chunks of size, pause apart, in the background;
// the returned function waits until all are published.
func (e *env) flow(t *testing.T, evs []event.Event, size int, pause time.Duration) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < len(evs); i += size {
			for _, ev := range evs[i:min(i+size, len(evs))] {
				if _, err := e.pub.PublishAsync(ev); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := e.pub.Flush(ctx)
			cancel()
			if err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			time.Sleep(pause) // pacing of the traffic, not a wait
		}
	}()
	return func() { <-done }
}

// waitAll waits until every one of want events of tenant is applied or
// dead-lettered, then fails on any dead letter (they are why) and checks
// nothing was applied twice.
func (e *env) waitAll(t *testing.T, tenant string, want int, why string) {
	t.Helper()
	dead := func() int {
		ids := map[string]bool{}
		for _, dls := range e.deadLetters(t, tenant) {
			for _, dl := range dls {
				ids[dl.EventID] = true
			}
		}
		return len(ids)
	}
	testenv.Eventually(t, settle, func() bool { return e.applied(t, tenant)+dead() >= want },
		"%s applied %d of %d events of %s, %d dead-lettered", e.a.Consumer, e.applied(t, tenant), want, tenant, dead())
	e.requireNoDeadLetters(t, tenant, why+" dead-letter nothing")
	require.Equal(t, want, e.applied(t, tenant), "no event applied twice or unknown")
}

// rebuildDuringTraffic: two copies run and traffic flows; a rebuild of the
// tenant resets its state and re-applies the history while both copies keep
// applying new events. Over its whole duration nothing is published but
// results of events published after the history had settled (live
// copies' own), the results of every event applied live meanwhile still
// reach the stream, and the final state equals the reference.
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
	// The history settles: its results are on the stream and no copy
	// holds one still to publish. From here, a result of these events can
	// only come from the rebuild.
	e.requireResults(t, tenant)
	e.waitOutboxEmpty(t, tenant)
	settled := e.lastSeq(t)
	before := a.State(t, e.pool, other)

	res := e.subscribeResults(t, tenant)
	// Live traffic across the rebuild's start and through it; the rest
	// after it, so every target changes after the rebuild (a state result
	// withheld during it is published with the next change).
	during := e.flow(t, evs[2400:2800], 10, 50*time.Millisecond)
	testenv.Eventually(t, time.Minute, func() bool { return e.applied(t, tenant) > 2400 }, "live traffic applied before the rebuild")
	appliedAtStart := e.applied(t, tenant)
	ctx, cancel := background()
	defer cancel()
	start := time.Now()
	rep, err := replay.Rebuild(ctx, e.nats.JS, e.pool, e.schema, a.Rebuild(e.pool), replay.Options{Tenant: tenant, BatchSize: 200, Log: testenv.Logger(t)})
	took := time.Since(start)
	published := res.all() // from before the rebuild began until it returned
	during()
	require.NoError(t, err)
	require.Empty(t, rep.Skipped)
	require.GreaterOrEqual(t, rep.Events, 2400)
	seqOf := map[string]uint64{}
	for _, d := range e.history(t, tenant) {
		seqOf[d.Event.ID()] = d.StreamSeq
	}
	for _, ev := range published {
		cause := bus.Causation(ev)
		require.Greater(t, seqOf[cause], settled, "%s published %s (caused by %s, seq %d) during the rebuild (%s): the history's results were all on the stream before it began",
			a.Consumer, ev.ID(), cause, seqOf[cause], took)
	}
	e.publish(t, evs[2800:])
	e.waitAll(t, tenant, len(evs), "a rebuild")
	require.Greater(t, len(evs), appliedAtStart, "traffic flowed during the rebuild")
	e.requireConsistent(t, tenant)
	require.Equal(t, before, a.State(t, e.pool, other), "another tenant is untouched")
	t.Logf("rebuild of %d events took %s; %d results of live traffic published while it ran", rep.Events, took, len(published))
}

// waitOutboxEmpty waits until no result of tenant waits in the outbox: all
// are published and their rows deleted.
func (e *env) waitOutboxEmpty(t *testing.T, tenant string) {
	t.Helper()
	count := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE tenant_id = $1`, tenant).Scan(&n))
		return n
	}
	testenv.Eventually(t, time.Minute, func() bool { return count() == 0 }, "%d results of %s in the outbox", count(), tenant)
}

// twoTenants: tenants a and b send the same event ids; both are applied
// and both get their results.
func twoTenants(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	ta, tb := testenv.Tenant(t), testenv.Tenant(t)
	evsA := a.Workload(t, ta, 60, 7)
	evsB := a.Workload(t, tb, 60, 7)
	for i := range evsB {
		evsB[i].SetID(evsA[i].ID())
	}
	c := a.Start(t, e.config(t, e.dbURL, 100))
	defer c.Stop()
	e.publish(t, append(append(evsA[:0:0], evsA...), evsB...))
	e.waitAll(t, ta, len(evsA), "two tenants")
	e.waitAll(t, tb, len(evsB), "two tenants")
	e.requireConsistent(t, ta)
	e.requireConsistent(t, tb)
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
	e.requireConsistent(t, tenant)
}

func ids(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID()
	}
	return out
}
