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
// failures: a delivery that ended in an outage, a shutdown or an ack-wait
// expiry is not the event's fault. The ledger is what tells them apart on
// the next delivery, in whichever copy it lands: a record holds the
// failures and the excused deliveries (outages, shutdowns); deliveries
// beyond those ended with no decision, which only happens when the process
// holding the event died or hung. Records are written only when an event
// is handed back (rare), read only on redelivery, and dropped when the
// event is settled; the bucket's TTL removes any a crash left behind.
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

	mu      sync.Mutex
	pending []jetstream.PubAckFuture
}

type ledgerRecord struct {
	failures, excused int
}

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
	return l.consumer + "." + strconv.FormatUint(seq, 10)
}

// get returns the record of the event at seq, and whether there is one.
func (l *ledger) get(ctx context.Context, seq uint64) (ledgerRecord, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := l.kv.Get(ctx, l.key(seq))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			l.log.Warn().Err(err).Uint64("stream_seq", seq).Msg("delivery ledger read; counting as no record")
		}
		return ledgerRecord{}, false
	}
	var rec ledgerRecord
	if _, err := fmt.Sscanf(string(e.Value()), "%d %d", &rec.failures, &rec.excused); err != nil {
		return ledgerRecord{}, false
	}
	return rec, true
}

// record stores the record of the event at seq. It does not wait: flush
// does, once per batch. A lost write only makes a later delivery look
// unsettled, which the MaxUnsettled margin absorbs.
func (l *ledger) record(seq uint64, failures, excused int) {
	l.publish(nats.NewMsg(l.subject(seq)), fmt.Sprintf("%d %d", failures, excused))
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

// flush waits for the writes made since the last flush, at most 2 s.
func (l *ledger) flush(ctx context.Context) {
	l.mu.Lock()
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for _, f := range pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			l.log.Warn().Err(err).Msg("delivery ledger write")
		case <-t.C:
			l.log.Warn().Msg("delivery ledger writes not acknowledged within 2s")
			return
		case <-ctx.Done():
			return
		}
	}
}
