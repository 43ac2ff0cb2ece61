package app

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
)

// lagTimeout bounds the consumer info requests of one scrape: a scrape
// during a NATS outage answers without the gauges instead of hanging.
const lagTimeout = 2 * time.Second

// lagCollector exports the lag of the durable consumers a process runs,
// read from JetStream's consumer info at scrape time: the server's own
// count, the same for every copy of a consumer, and right after a restart.
type lagCollector struct {
	js  jetstream.JetStream
	log zerolog.Logger

	mu    sync.Mutex
	names []string

	pending, ackPending, redelivered *prometheus.Desc
}

func newLagCollector(js jetstream.JetStream, log zerolog.Logger) *lagCollector {
	label := []string{"consumer"}
	return &lagCollector{
		js: js, log: log,
		pending: prometheus.NewDesc("agentq_consumer_pending",
			"Events in stream AGENTQ the consumer has not been delivered yet (JetStream consumer info num_pending).", label, nil),
		ackPending: prometheus.NewDesc("agentq_consumer_ack_pending",
			"Events delivered to the consumer and not acked yet: in hand or waiting for a retry (num_ack_pending).", label, nil),
		redelivered: prometheus.NewDesc("agentq_consumer_redelivered",
			"Events delivered more than once and not acked yet (num_redelivered).", label, nil),
	}
}

// add makes name one of the consumers reported.
func (c *lagCollector) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.names, name) {
		c.names = append(c.names, name)
	}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.ackPending
	ch <- c.redelivered
}

// Collect asks the server for each consumer's info. A consumer that does
// not exist (yet, or at all: webhook delivery with no endpoint creates
// none) has no series; a failed request is logged and leaves its series
// out of this scrape, rather than failing the scrape.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	names := slices.Clone(c.names)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	for _, name := range names {
		cons, err := c.js.Consumer(ctx, bus.StreamName, name)
		var info *jetstream.ConsumerInfo
		if err == nil {
			info, err = cons.Info(ctx)
		}
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			continue
		case err != nil:
			c.log.Debug().Err(err).Str("consumer", name).Msg("consumer lag not read")
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(info.NumPending), name)
		ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, float64(info.NumAckPending), name)
		ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(info.NumRedelivered), name)
	}
}
