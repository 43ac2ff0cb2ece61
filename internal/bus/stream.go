package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names.
const (
	StreamName = "AGENTQ"
	DLQName    = "AGENTQ_DLQ"
	dlqPrefix  = "dlq"
)

// FactSubjects are the subjects of stream AGENTQ: every input and result
// domain. search.> is request/reply on core NATS and is deliberately absent.
var FactSubjects = []string{
	"prompt.>", "tool.>", "feedback.>", "experiment.>", "quality.>",
	"indexer.>", "scorer.>", "rater.>", "degrader.>", "lab.>",
}

// StreamOptions configures the two streams.
type StreamOptions struct {
	MaxAge     time.Duration // 0: keep forever
	MaxBytes   int64         // -1 or 0: unlimited
	Replicas   int           // 1 on a single server, 3 on a cluster
	Duplicates time.Duration // Nats-Msg-Id duplicate window; default 2m
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Duplicates <= 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = -1
	}
	return o
}

// EnsureStreams creates or updates AGENTQ and AGENTQ_DLQ, and the delivery
// ledger bucket (see LedgerBucket). It is idempotent
// and safe for many processes starting together. It retries while JetStream
// is not ready yet (a cluster without a meta leader drops requests until one
// is elected), each attempt bounded to 2 s, until ctx ends.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	o = o.withDefaults()
	cfgs := []jetstream.StreamConfig{{
		Name:        StreamName,
		Description: "agentq facts: every input and result event",
		Subjects:    FactSubjects,
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      o.MaxAge,
		MaxBytes:    o.MaxBytes,
		Replicas:    o.Replicas,
		Duplicates:  o.Duplicates,
	}, {
		Name:        DLQName,
		Description: "agentq dead letters: original message plus reason",
		Subjects:    []string{dlqPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      o.MaxAge,
		MaxBytes:    o.MaxBytes,
		Replicas:    o.Replicas,
		Duplicates:  o.Duplicates,
		// A dead letter that refers to its original expires with it.
		AllowMsgTTL: true,
	}}
	for _, cfg := range cfgs {
		if err := retryJS(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	if err := retryJS(ctx, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateKeyValue(ctx, ledgerConfig(o.Replicas))
		return err
	}); err != nil {
		return fmt.Errorf("ensure delivery ledger %s: %w", LedgerBucket, err)
	}
	return nil
}

// retryJS runs op with a 2 s deadline per attempt until it succeeds, fails
// with an error that retrying cannot fix, or ctx ends.
func retryJS(ctx context.Context, op func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		retryable := errors.Is(err, context.DeadlineExceeded) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
			errors.Is(err, jetstream.ErrNoStreamResponse)
		if !retryable || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
