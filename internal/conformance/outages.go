package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// rollingRestarts: two copies at the runner's production settings (the
// defaults: batch 500, 1 s pulls, 30 s ack wait, 10 s grace, budget 5)
// are stopped gracefully one at a time and replaced while events flow, as
// a deployment rolls. Events arriving while a copy stops are handed to
// the others: nothing is dead-lettered, lost or applied twice.
func rollingRestarts(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 1200, 9)
	cfg := e.prodConfig(t, e.dbURL)
	// One copy first, replaced as a one-copy deployment is (stop, then
	// start): whatever arrives while it stops waits for the next. Then
	// two, rolled one at a time: the other copy takes what arrives.
	copies := []Copy{a.Start(t, cfg)}
	defer func() {
		for _, c := range copies {
			c.Stop()
		}
	}()
	published := make(chan struct{})
	wait := e.flow(t, evs, 10, 40*time.Millisecond)
	go func() { wait(); close(published) }()
	restarts := 0
	for flowing := true; flowing || restarts < 6; restarts++ {
		if restarts == 3 {
			copies = append(copies, a.Start(t, cfg))
		}
		i := restarts % len(copies)
		copies[i].Stop() // events keep arriving while it stops
		copies[i] = a.Start(t, cfg)
		select {
		case <-published:
			flowing = false
		case <-time.After(300 * time.Millisecond): // the new copy works a while before the next one stops
		}
	}
	e.waitAll(t, tenant, len(evs), "graceful restarts")
	e.requireConsistent(t, tenant)
	t.Logf("%d rolling restarts", restarts)
}

// shutdownsDuringSlowWork: an event whose handling takes longer than the
// shutdown grace (its inbox insert sleeps) is in a copy's hands each time
// the copy is stopped, more times than its failure budget allows. A
// shutdown is not the event's failure: once the slowness is gone it is
// applied, and nothing is dead-lettered.
func shutdownsDuringSlowWork(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 20, 10)
	slow := evs[0]
	cfg := e.config(t, e.dbURL, 10)
	cfg.ShutdownGrace = 300 * time.Millisecond
	cfg.MaxDeliver = 2
	e.setFaults(t, tenant, faults{slow: []string{slow.ID()}, delay: 3 * time.Second})
	e.publish(t, evs[:1])
	delivered := func() uint64 {
		cons, err := e.nats.JS.Consumer(context.Background(), bus.StreamName, a.Consumer)
		if err != nil {
			return 0 // not created yet
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return 0
		}
		return info.Delivered.Consumer
	}
	rounds := 0
	for ; rounds < 2*cfg.MaxDeliver; rounds++ {
		last := delivered()
		c := a.Start(t, cfg)
		testenv.Eventually(t, time.Minute, func() bool { return delivered() > last || len(e.deadLetters(t, tenant)) > 0 },
			"the slow event delivered again")
		// It is in the copy's hands, its insert sleeping: the grace ends
		// before the handler does.
		c.Stop()
		if len(e.deadLetters(t, tenant)) > 0 {
			break
		}
	}
	e.requireNoDeadLetters(t, tenant, "shutdowns while an event was in hand")
	e.setFaults(t, tenant, faults{})
	c := a.Start(t, cfg)
	defer c.Stop()
	e.publish(t, evs[1:])
	e.waitAll(t, tenant, len(evs), "shutdowns")
	e.requireConsistent(t, tenant)
	t.Logf("%d shutdowns with the slow event in hand", rounds)
}

// outageDuringRebuild: the database goes away under every copy and under
// a rebuild of one tenant (right after its reset) while another tenant's
// events arrive, for longer than every retry budget: longer than the
// rebuild retries a batch, and many times the new events' budget of one
// failure (the smallest: one failure dead-letters, so do four deliveries
// that ended with no decision). Meanwhile the delivery ledger stops
// answering reads, its records intact. An outage of any length
// dead-letters nothing, and the rebuild waits it out, or fails saying so
// and a re-run afterwards repairs; it never reports success with events
// missing, and publishes nothing.
func outageDuringRebuild(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	rebuilt, live := testenv.Tenant(t), testenv.Tenant(t)
	history := a.Workload(t, rebuilt, 400, 12)
	evs := a.Workload(t, live, 300, 13)
	proxy := testenv.StartProxy(t, hostPort(t, e.dbURL))
	cfg := e.prodConfig(t, proxy.RewriteURL(t, e.dbURL))
	cfg.MaxDeliver = 1
	c1, c2 := a.Start(t, cfg), a.Start(t, cfg)
	defer c1.Stop()
	defer c2.Stop()
	e.publish(t, history)
	e.publish(t, evs[:200])
	e.waitAll(t, rebuilt, len(history), "live processing")
	e.waitAll(t, live, 200, "live processing")
	e.requireResults(t, rebuilt)
	e.waitOutboxEmpty(t, rebuilt)
	res := e.subscribeResults(t, rebuilt)
	pool := openPool(t, proxy.RewriteURL(t, e.dbURL))

	// The outage outlasts the rebuild's retries of a batch (22.5 s today)
	// and the new events' budget many times over; their deliveries come
	// back 1, 2, 5, 10 and 30 s apart (the runner's backoff). By 5 s in,
	// the ledger has recorded the first ones as excused; then it stops
	// answering reads until just before the database returns. These are
	// the lengths of the phases, not waits for conditions.
	const outage = 30 * time.Second
	down := make(chan time.Time, 1)
	restored := make(chan error, 1)
	var once sync.Once
	opts := replay.Options{Tenant: rebuilt, BatchSize: 50, Log: testenv.Logger(t), Progress: func(done, total uint64) {
		once.Do(func() { // after the reset and the first batch
			proxy.Down()
			down <- time.Now()
			time.AfterFunc(outage, func() { restored <- proxy.Restore() })
		})
	}}
	ctx, cancel := background()
	defer cancel()
	type outcome struct {
		rep replay.Report
		err error
		at  time.Time
	}
	rebuild := make(chan outcome, 1)
	go func() {
		rep, err := replay.Rebuild(ctx, e.nats.JS, pool, e.schema, a.Rebuild(pool), opts)
		rebuild <- outcome{rep, err, time.Now()}
	}()
	var start time.Time
	select {
	case start = <-down:
	case o := <-rebuild:
		t.Fatalf("the rebuild returned before its first batch was applied: %+v, %v", o.rep, o.err)
	}
	e.publish(t, evs[200:])
	defer e.ledgerReads(t, true)
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	e.ledgerReads(t, false)
	time.Sleep(time.Until(start.Add(outage - time.Second)))
	e.ledgerReads(t, true)
	require.NoError(t, <-restored)

	o := <-rebuild
	if o.err != nil {
		t.Logf("the rebuild failed during the outage after %s (allowed: it says so, and a re-run repairs): %v", o.at.Sub(start), o.err)
		opts.Progress = nil
		o.rep, o.err = replay.Rebuild(ctx, e.nats.JS, pool, e.schema, a.Rebuild(pool), opts)
		require.NoError(t, o.err, "a rebuild after the outage")
	}
	// Two verdicts, each on its own: the live copies' and the rebuild's.
	t.Run("LiveEventsAllApplied", func(t *testing.T) {
		e.waitAll(t, live, len(evs), "an outage of every copy with the ledger unreadable")
		e.requireConsistent(t, live)
	})
	t.Run("RebuildMissedNothing", func(t *testing.T) {
		require.Empty(t, o.rep.Skipped, "a rebuild that reports success applied every event (it returned %s after a %s outage began)", o.at.Sub(start), outage)
		e.requireConsistent(t, rebuilt)
		require.Empty(t, ids(res.all()), "the rebuild published nothing")
		e.requireNoDeadLetters(t, rebuilt, "a rebuild during an outage")
	})
}

// ledgerUnreadable: some events are refused by the database as an outage
// of their own ("cannot connect now") and handed back every second or two
// while other traffic flows, each delivery recorded in the ledger as
// excused; then the ledger stops answering reads, its records intact,
// while they keep coming back. The ledger being unavailable is itself an
// outage, not evidence that a copy died holding them: with a budget of
// one failure (four deliveries that ended with no decision), nothing is
// dead-lettered.
func ledgerUnreadable(t *testing.T, a Adapter) {
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	evs := a.Workload(t, tenant, 200, 15)
	cfg := e.config(t, e.dbURL, 1) // one event a batch: the others' batches succeed, so the runner never backs off long
	cfg.MaxDeliver = 1
	c := a.Start(t, cfg)
	defer c.Stop()
	e.publish(t, evs[:20])
	e.waitApplied(t, tenant, 20)
	refused := ids([]event.Event{evs[20], evs[21]})
	e.setFaults(t, tenant, faults{refuse: refused})
	wait := e.flow(t, evs[20:], 5, 100*time.Millisecond)
	testenv.Eventually(t, time.Minute, func() bool { return e.refused(t, tenant) >= int64(4*len(refused)) },
		"the refused events handed back four times each")
	e.ledgerReads(t, false)
	defer e.ledgerReads(t, true)
	// Long enough for several more deliveries each (they came back every
	// second or two): the length of the phase, not a wait for a condition,
	// since a runner may rightly hold them back while it cannot read.
	time.Sleep(6 * time.Second)
	e.ledgerReads(t, true)
	e.setFaults(t, tenant, faults{})
	wait()
	e.waitAll(t, tenant, len(evs), "deliveries while the ledger is unreadable")
	e.requireConsistent(t, tenant)
}

// timers: a consumer whose state changes as time passes gets a timed
// workload; the first half is processed as it arrives, the second half
// late (the copy is down while it is published, over several of its
// timers' periods). Stream time, not the clock, decides the transitions:
// the state and results equal the reference computed from the events'
// stream times, and a rebuild afterwards reaches the same state and
// publishes nothing.
func timers(t *testing.T, a Adapter) {
	if a.Timers != nil {
		a = *a.Timers
	}
	if a.Timed == nil {
		t.Skip("the consumer has no timers (Adapter.Timed)")
	}
	e := newEnv(t, a)
	tenant := testenv.Tenant(t)
	steps := a.Timed(t, tenant, 14)
	cfg := e.config(t, e.dbURL, 20)
	c := a.Start(t, cfg)
	n, half := 0, len(steps)/2
	for i, s := range steps {
		if i == half {
			c.Stop()
		}
		time.Sleep(s.After) // the workload's own pacing: stream time advances
		e.publish(t, s.Events)
		n += len(s.Events)
		if i < half {
			e.waitApplied(t, tenant, n) // promptly, as it arrives
		}
	}
	c = a.Start(t, cfg)
	defer c.Stop()
	e.waitAll(t, tenant, n, "a timed workload")
	e.requireConsistent(t, tenant)
	e.requireResults(t, tenant)
	e.waitOutboxEmpty(t, tenant)
	live := a.State(t, e.pool, tenant)
	res := e.subscribeResults(t, tenant)
	ctx, cancel := background()
	defer cancel()
	rep, err := replay.Rebuild(ctx, e.nats.JS, e.pool, e.schema, a.Rebuild(e.pool), replay.Options{Tenant: tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Empty(t, rep.Skipped)
	require.Equal(t, live, a.State(t, e.pool, tenant), "a rebuild reaches the transitions live processing reached")
	require.Empty(t, ids(res.all()), "the rebuild published nothing")
}
