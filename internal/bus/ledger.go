package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// LedgerBucket is the JetStream key-value bucket where runners record how
// the deliveries of an event ended, by consumer and stream sequence.
//
// JetStream counts deliveries, but agentq's delivery budget counts
// failures: a delivery that ended in an outage, a deferral, a shutdown or
// an ack-wait expiry is not the event's fault. The ledger is what tells
// them apart on the next delivery, in whichever copy it lands. A record
// holds the event's failures, its excused deliveries (outages, deferrals,
// shutdowns), the deliveries known to have ended with no decision, and
// the delivery in hand, if any.
//
// An unsettled delivery (the process holding the event died or hung) is
// counted only on evidence: a redelivery is marked in hand before the
// handler sees it, and a later delivery that finds the mark still there
// knows the earlier one ended with no decision. A ledger that cannot be
// read or written is an outage of its own, never evidence: a failed read
// leaves the accounting unknown (the event is handled, nothing is
// overwritten), and a write that fails while the ledger is down cannot
// store a mark either. So outages of any length, with the ledger down or
// not, never dead-letter an event as unsettled; the most a failing ledger
// can cost is one unsettled delivery, when it fails exactly between the
// mark and the decision that clears it. Records are written when a
// redelivery is marked and when an event is handed back (both rare),
// always before the nak that lets the next delivery read them, and
// dropped when the event is settled; the bucket's TTL removes any a crash
// left behind.
const LedgerBucket = "agentq_deliveries"

const ledgerTTL = 7 * 24 * time.Hour

// ledgerConfig is the bucket's configuration; EnsureStreams and the runner
// both create it with this, idempotently.
func ledgerConfig(replicas int) jetstream.KeyValueConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.KeyValueConfig{
		Bucket:      LedgerBucket,
		Description: "agentq: how each event's deliveries ended (failures, excused)",
		TTL:         ledgerTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

type ledger struct {
	js       jetstream.JetStream
	consumer string
	log      zerolog.Logger
	kv       jetstream.KeyValue
	// epoch names the consumer the records belong to: its creation time.
	// A stream deleted and created again takes its consumers with it, and
	// a recreated consumer counts deliveries from 1 again, so records of
	// an earlier one must never be read as this one's. Set by the runner
	// before each session's fetcher starts.
	epoch string

	mu        sync.Mutex
	pending   []jetstream.PubAckFuture
	downUntil time.Time // reads fail fast until then: the ledger just failed one
}

// ledgerRecord is what the ledger knows of an event's earlier deliveries.
type ledgerRecord struct {
	failures  int    // ended in the event's own failure
	excused   int    // handed back for a reason not its own
	unsettled int    // known to have ended with no decision
	inHand    uint64 // the delivery marked in hand and not yet decided; 0: none
}

func (r ledgerRecord) String() string {
	return fmt.Sprintf("%d %d %d %d", r.failures, r.excused, r.unsettled, r.inHand)
}

// errLedgerDown answers reads while the ledger is known to be failing, so a
// batch of redeliveries does not wait out a timeout each.
var errLedgerDown = errors.New("delivery ledger unavailable")

// ledgerRetry is how long the ledger is taken for down after a read or a
// write failed: reads fail fast, marks are not written, writes are not
// waited for.
const ledgerRetry = time.Second

func (l *ledger) open(ctx context.Context) error {
	err := retryJS(ctx, func(ctx context.Context) error {
		kv, err := l.js.KeyValue(ctx, LedgerBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = l.js.CreateKeyValue(ctx, ledgerConfig(1))
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = l.js.KeyValue(ctx, LedgerBucket)
			}
		}
		l.kv = kv
		return err
	})
	if err != nil {
		return fmt.Errorf("delivery ledger: %w", err)
	}
	return nil
}

func (l *ledger) key(seq uint64) string {
	return l.consumer + "." + l.epoch + "." + strconv.FormatUint(seq, 10)
}

// get returns the record of the event at seq, and whether there is one, or
// an error when the ledger could not say: then nothing is known. It never
// uses the caller's context: a stopping runner must not turn a read into
// "no record".
func (l *ledger) get(seq uint64) (ledgerRecord, bool, error) {
	if l.down() {
		return ledgerRecord{}, false, errLedgerDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e, err := l.kv.Get(ctx, l.key(seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ledgerRecord{}, false, nil
	}
	if err != nil {
		l.failed()
		l.log.Warn().Err(err).Uint64("stream_seq", seq).Msg("delivery ledger read failed; this delivery's history is unknown")
		return ledgerRecord{}, false, fmt.Errorf("%w: %w", errLedgerDown, err)
	}
	var rec ledgerRecord
	if _, err := fmt.Sscanf(string(e.Value()), "%d %d %d %d", &rec.failures, &rec.excused, &rec.unsettled, &rec.inHand); err != nil {
		// Not a record this version wrote: no evidence of anything.
		return ledgerRecord{}, false, nil
	}
	return rec, true, nil
}

// record stores the record of the event at seq. It does not wait: flush
// does, before the naks that let another delivery read it.
func (l *ledger) record(seq uint64, rec ledgerRecord) {
	l.publish(nats.NewMsg(l.subject(seq)), rec.String())
}

// forget drops the record of the event at seq.
func (l *ledger) forget(seq uint64) {
	m := nats.NewMsg(l.subject(seq))
	m.Header.Set("KV-Operation", "PURGE")
	m.Header.Set("Nats-Rollup", "sub")
	l.publish(m, "")
}

func (l *ledger) subject(seq uint64) string {
	return "$KV." + LedgerBucket + "." + l.key(seq)
}

func (l *ledger) publish(m *nats.Msg, value string) {
	m.Data = []byte(value)
	f, err := l.js.PublishMsgAsync(m, jetstream.WithStallWait(2*time.Second))
	if err != nil {
		l.log.Warn().Err(err).Str("subject", m.Subject).Msg("delivery ledger write")
		return
	}
	l.mu.Lock()
	l.pending = append(l.pending, f)
	l.mu.Unlock()
}

// flush waits for the writes made since the last flush, at most 2 s in
// all, unless the ledger is known to be failing: then waiting would only
// slow every batch of an outage. A write that fails is logged and given up
// (see LedgerBucket for what that can cost).
func (l *ledger) flush() {
	l.mu.Lock()
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(pending) == 0 || l.down() {
		return
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for _, f := range pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			l.failed()
			l.log.Warn().Err(err).Msg("delivery ledger write")
		case <-t.C:
			l.failed()
			l.log.Warn().Msg("delivery ledger writes not acknowledged within 2s")
			return
		}
	}
}

// down reports that the ledger failed a read or a write less than
// ledgerRetry ago.
func (l *ledger) down() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.downUntil)
}

func (l *ledger) failed() {
	l.mu.Lock()
	l.downUntil = time.Now().Add(ledgerRetry)
	l.mu.Unlock()
}
