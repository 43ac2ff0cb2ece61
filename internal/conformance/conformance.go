// Package conformance is the suite every agentq consumer passes before it
// is done, in the spirit of Watermill's universal Pub/Sub tests: a consumer
// gives a small Adapter (how to start a copy, make input events, read its
// state, compute the reference state and the results the inputs call for)
// and Run proves, against a real NATS server and a real Postgres, the
// guarantees of DESIGN.md §3. Every scenario ends with the same two
// checks: the state equals the reference (the events applied one by one in
// stream order) field by field, and every input's results are on the
// stream exactly once with the right content (per event, or the final
// state per target for a consumer whose results are state snapshots).
//
//   - duplicates and republished events apply once;
//   - a republished copy of an event (no Nats-Msg-Id) that commits before
//     its original still counts at the original's place in the stream;
//   - two copies with small batches, injected transient database failures
//     and an outage under one copy reach the reference state;
//   - a poison event that fails its batch's transaction is the only one
//     dead-lettered, and redriven with `agentq dlq --redrive` it counts at
//     its original place;
//   - copies killed for real (separate processes, SIGKILL: their database
//     transactions and NATS connections cut mid-flight) while events flow
//     lose nothing and apply nothing twice;
//   - rolling restarts (graceful stops one copy at a time, new copies
//     started) while events flow, at the runner's production settings,
//     dead-letter nothing;
//   - shutdowns while an event's handling outlasts the grace period, more
//     of them than its failure budget, spend none of it;
//   - a rebuild during live traffic with two copies publishes nothing over
//     its whole duration, and the results of events applied live
//     meanwhile still reach the stream;
//   - a 30 s database outage of every copy and of a rebuild of another
//     tenant, with a budget of one failure and the delivery ledger
//     unreadable for most of it, dead-letters nothing, and the rebuild
//     never reports success with events missing (it waits, or fails and a
//     re-run repairs);
//   - events handed back as outages of their own, again and again, while
//     the delivery ledger cannot be read, are not taken for events whose
//     copies died: nothing is dead-lettered;
//   - two tenants with identical event ids are both applied;
//   - bad inputs (undecodable, schema, oversized, wrong tenant, bad id, huge
//     headers) are dead-lettered with their reason without harming valid
//     neighbours;
//   - for a consumer with timers (Adapter.Timed), processing late and a
//     rebuild reach the transitions live processing reached, following
//     stream time.
//
// Faults are real: a TCP proxy cuts the database away; a trigger on the
// inbox table (installed in the test database only) raises deadlocks at a
// chosen rate, a data error for chosen event ids, a deadlock for held ids,
// "cannot connect now" for refused ones, or sleeps for slow ones; the
// ledger's stream stops serving direct gets, so reads fail while its
// records stay; and copies run as child processes (the test binary again,
// see Run) that are SIGKILLed.
//
// The scorer's reference is written in its test from the README's
// formulas, independently of its fold code; the rater's and the indexer's
// follow their own Compute (the rules rater's heuristics, the indexer's
// published decisions), with the shape of their results (which inputs get
// one, ids, causes, targets) derived in their tests.
package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// Copy is one running copy of a consumer.
type Copy interface {
	// Stop stops it gracefully and waits.
	Stop()
	// Kill stops it abruptly, as kill -9 would: its NATS connection and
	// database connections are cut first, so nothing it held is settled.
	Kill()
}

// Adapter is what a consumer gives the suite.
type Adapter struct {
	// Consumer is the consumer's name (its durable and inbox name).
	Consumer string
	// Subjects are the consumer's filter subjects (tenant token "*").
	Subjects []string
	// ResultSubjects are the subjects of its results, tenant token "*".
	ResultSubjects []string
	// Start runs one copy with cfg (NATS, database and runner settings
	// prepared by the suite) until Stop or Kill. The suite also calls it
	// in a child process (see Run), where it must not depend on anything
	// but cfg.
	Start func(t *testing.T, cfg config.Config) Copy
	// Workload returns n valid input events of tenant, deterministic in
	// seed, each with its own id.
	Workload func(t *testing.T, tenant string, n int, seed uint64) []event.Event
	// State reads the consumer's whole state of tenant: every field that
	// matters, in a canonical order.
	State func(t *testing.T, pool *pgxpool.Pool, tenant string) any
	// Reference is the state deliveries give when applied one by one in
	// the order given (stream order), computed without the consumer's
	// database or runner.
	Reference func(deliveries []*bus.Delivery) any
	// ReferenceReadsResults gives Reference (and ExpectedResults) the
	// consumer's own results (ResultSubjects) too, in stream order among
	// the inputs: for a consumer whose decisions depend on what it applied
	// before and are published as facts (the indexer's next free version,
	// the winner of two conflicting creates), the reference follows those
	// facts.
	ReferenceReadsResults bool
	// ExpectedResults returns the results the history calls for (the
	// deliveries Reference gets), rendered as ReadResult renders them:
	// one per input that has a result, or, with StateResults, the final
	// state of every target. Nil: results are not checked.
	ExpectedResults func(deliveries []*bus.Delivery) []Result
	// ReadResult renders one result event of the consumer for comparison
	// with ExpectedResults.
	ReadResult func(ev event.Event) Result
	// StateResults says the consumer's results are snapshots of a
	// target's state, versioned per target (quality.changed): what
	// batches publish on the way depends on batching, so only the newest
	// version of each target is compared; every version is published at
	// most once.
	StateResults bool
	// Rebuild is the consumer as agentq replay rebuilds it.
	Rebuild func(pool *pgxpool.Pool) replay.Target
	// Timed, for a consumer whose state changes as time passes (the
	// degrader's quarantine expiry), returns a workload whose steps must
	// be published apart in time. Its transitions must follow stream time
	// (bus.Delivery.Time), so processing late and a rebuild long after
	// reach the transitions prompt live processing reached, and Reference
	// and ExpectedResults compute them from the deliveries' times. Nil:
	// the consumer has no timers and the scenario is skipped.
	Timed func(t *testing.T, tenant string, seed uint64) []Step
	// Timers, when set, is the adapter as the timers scenario runs it: a
	// consumer whose deadlines are long in production (a quarantine of
	// minutes) runs that scenario with short ones, and its Reference and
	// ExpectedResults know them. The other scenarios use the adapter
	// itself, whose deadlines must not fall due during a scenario: they
	// check that nothing changes while nothing is sent.
	Timers *Adapter
}

// Result is one result event as the suite compares it.
type Result struct {
	// Key is what the result is about: the causing event's id for a
	// per-event result, the target for a state result.
	Key string
	// Version orders a target's state results (state_version); 0 for
	// per-event results.
	Version int64
	// ID and Type are the result event's id and type.
	ID, Type string
	// Revised marks a state result that supersedes the one published
	// before it with the same Version (the scorer's re-filing of an event
	// whose copy was applied first): for that version, the last revised
	// result in stream order is the one compared.
	Revised bool
	// Data is its content as compared: every field that matters, with
	// what legitimately varies (a measured latency, which event of a
	// batch caused a state result) left out.
	Data any
}

// Step is a part of a timed workload: Events are published After the
// previous step's (real time, so stream time advances).
type Step struct {
	After  time.Duration
	Events []event.Event
}

// Run runs the whole suite against a.
//
// The test binary is also where the suite's child copies come from: the
// kill scenario runs the calling top-level test again in a child process
// with the copy's configuration in the environment, and there Run starts
// one copy with Adapter.Start, reports ready, and runs until the parent
// stops it (SIGTERM) or kills it (SIGKILL).
func Run(t *testing.T, a Adapter) {
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(t, a, spec)
		return
	}
	t.Run("DuplicatesAndRepublishApplyOnce", func(t *testing.T) { duplicates(t, a) })
	t.Run("RepublishedCopyCommittedFirstCountsAtTheOriginal", func(t *testing.T) { copyBeforeOriginal(t, a) })
	t.Run("TwoCopiesFaultsAndOutageMatchStreamOrder", func(t *testing.T) { twoCopiesWithFaults(t, a) })
	t.Run("PoisonInBatchIsTheOnlyDeadLetterAndRedrives", func(t *testing.T) { poison(t, a) })
	t.Run("KillsOfProcessesLoseNothing", func(t *testing.T) { kills(t, a) })
	t.Run("RollingRestartsUnderTrafficLoseNothing", func(t *testing.T) { rollingRestarts(t, a) })
	t.Run("ShutdownsDuringSlowWorkSpendNoBudget", func(t *testing.T) { shutdownsDuringSlowWork(t, a) })
	t.Run("RebuildDuringLiveTrafficPublishesNothing", func(t *testing.T) { rebuildDuringTraffic(t, a) })
	t.Run("OutageOfEveryCopyAndARebuildLosesNothing", func(t *testing.T) { outageDuringRebuild(t, a) })
	t.Run("LedgerUnreadableIsAnOutage", func(t *testing.T) { ledgerUnreadable(t, a) })
	t.Run("TwoTenantsWithIdenticalEventIDs", func(t *testing.T) { twoTenants(t, a) })
	t.Run("BadInputsAreDeadLetteredWithTheirReason", func(t *testing.T) { badInputs(t, a) })
	t.Run("TimersFollowStreamTime", func(t *testing.T) { timers(t, a) })
}

// settle is how long the suite waits for a consumer to catch up.
const settle = 3 * time.Minute

func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), settle)
}

// childEnv carries a child copy's configuration (base64 of its JSON).
const childEnv = "AGENTQ_CONFORMANCE_COPY"

// runChild is Run in a child process: one copy until the parent stops it.
func runChild(t *testing.T, a Adapter, spec string) {
	raw, err := base64.StdEncoding.DecodeString(spec)
	require.NoError(t, err)
	var cfg config.Config
	require.NoError(t, json.Unmarshal(raw, &cfg))
	c := a.Start(t, cfg)
	<-testenv.ChildReady()
	c.Stop()
}

// childCopy is a copy running in a child process.
type childCopy struct{ *testenv.Child }

// startChild runs a copy with cfg in a child process: the test binary
// running the top-level test top again (see Run).
func startChild(t *testing.T, top string, dbURL string, cfg config.Config) Copy {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	return childCopy{testenv.StartChild(t, top,
		childEnv+"="+base64.StdEncoding.EncodeToString(raw),
		// The child's testenv finds the parent's database instead of
		// starting one of its own.
		"AGENTQ_DATABASE_URL="+dbURL)}
}

// topTest is the name of the top-level test t belongs to.
func topTest(t *testing.T) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}
