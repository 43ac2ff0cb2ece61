// Package conformance is the suite every agentq consumer passes before it
// is done, in the spirit of Watermill's universal Pub/Sub tests: a consumer
// gives a small Adapter (how to start a copy, make input events, read its
// state, compute the reference state) and Run proves, against a real NATS
// server and a real Postgres, the guarantees of DESIGN.md §3:
//
//   - duplicates and republished events apply once;
//   - two copies with small batches, injected transient database failures
//     and an outage reach exactly the state of the events applied in stream
//     order, field by field;
//   - a poison event that fails its batch's transaction is the only one
//     dead-lettered;
//   - abrupt kills at random points lose nothing and apply nothing twice;
//   - a rebuild during live traffic with two copies running gives the
//     reference state and publishes nothing;
//   - two tenants with identical event ids are both applied;
//   - bad inputs (undecodable, schema, oversized, wrong tenant, bad id, huge
//     headers) are dead-lettered with their reason without harming valid
//     neighbours.
//
// Faults are real: a TCP proxy cuts the database away, and a trigger on the
// inbox table (installed in the test database only) raises deadlocks at a
// chosen rate, or a data error for chosen event ids.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/replay"
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
	// prepared by the suite) until Stop or Kill.
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
	// ReferenceReadsResults gives Reference the consumer's own results
	// (ResultSubjects) too, in stream order among the inputs: for a
	// consumer whose decisions depend on what it applied before and are
	// published as facts (the indexer's next free version, the winner of
	// two conflicting creates), the reference follows those facts.
	ReferenceReadsResults bool
	// Rebuild is the consumer as agentq replay rebuilds it.
	Rebuild func(pool *pgxpool.Pool) replay.Target
}

// Run runs the whole suite against a.
func Run(t *testing.T, a Adapter) {
	t.Run("DuplicatesAndRepublishApplyOnce", func(t *testing.T) { duplicates(t, a) })
	t.Run("TwoCopiesFaultsAndOutageMatchStreamOrder", func(t *testing.T) { twoCopiesWithFaults(t, a) })
	t.Run("PoisonInBatchIsTheOnlyDeadLetter", func(t *testing.T) { poison(t, a) })
	t.Run("KillsAtRandomPointsLoseNothing", func(t *testing.T) { kills(t, a) })
	t.Run("RebuildDuringLiveTrafficPublishesNothing", func(t *testing.T) { rebuildDuringTraffic(t, a) })
	t.Run("TwoTenantsWithIdenticalEventIDs", func(t *testing.T) { twoTenants(t, a) })
	t.Run("BadInputsAreDeadLetteredWithTheirReason", func(t *testing.T) { badInputs(t, a) })
}

// settle is how long the suite waits for a consumer to catch up.
const settle = 3 * time.Minute

func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), settle)
}
